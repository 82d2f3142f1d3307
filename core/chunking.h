// Cutting a job's tensors into chunks: the unit a shard stores, updates and
// versions.
//
//   PS_RETURN_IF_ERROR(ValidateTensors(spec));
//   std::vector<ChunkPlacement> chunks = CutIntoChunks(spec);
//   for (ChunkPlacement& c : chunks) c.set_shard(PickShard(c));
//
// Tensors are cut in spec order, each into pieces of at most
// ChunkElements(spec) floats; chunk_id is the position in the returned list,
// which is the order of Placement.chunks.
#ifndef CORE_CHUNKING_H_
#define CORE_CHUNKING_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/defaults.h"
#include "proto/job.pb.h"

namespace ps {

// Checks what chunking and initialisation rely on: partition_bytes (0 =
// kDefaultPartitionBytes, else a multiple of 4 in [4, 3 MiB], so that a chunk
// fits one gRPC message with room to spare), at least one tensor, each with a
// unique non-empty name, a non-empty shape of dimensions > 0 whose element
// count fits in 64 bits, a valid init (core/init.h), and a total chunk
// count that fits a uint32 chunk_id. Errors are kInvalidArgument naming the
// field, e.g. "tensors[2].shape[1]: must be > 0".
absl::Status ValidateTensors(const JobSpec& spec);

// Floats per chunk: partition_bytes / 4 (default 1 MiB).
uint64_t ChunkElements(const JobSpec& spec);

// Elements of a tensor: the product of its shape (1 for an empty shape).
// Requires no overflow (ValidateTensors).
uint64_t NumElements(const TensorSpec& tensor);

// Every chunk of every tensor, in tensor order then chunk index: tensor,
// index, offset and length (in elements) set, chunk_id = position, shard
// unset. A pure function; requires ValidateTensors(spec).ok() (an invalid
// spec gives a meaningless, possibly huge, result).
std::vector<ChunkPlacement> CutIntoChunks(const JobSpec& spec);

}  // namespace ps

#endif  // CORE_CHUNKING_H_
