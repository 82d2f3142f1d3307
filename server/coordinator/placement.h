// Chunk placement: which shard holds which chunk of a job's tensors.
//
// Computed once, at submit, by the coordinator and shipped with the job to
// workers and shards. Deterministic (the same spec and shard count always
// give the same placement) and size-aware (bytes per shard balanced).
//
//   absl::StatusOr<JobSpec> spec = NormalizeJobSpec(user_spec, ctx);
//   absl::StatusOr<Placement> placement = PlaceChunks(*spec, /*num_shards=*/4);
//   for (const ChunkPlacement& c : placement->chunks()) { ... c.shard() ... }

#ifndef SERVER_COORDINATOR_PLACEMENT_H_
#define SERVER_COORDINATOR_PLACEMENT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"

namespace ps {

// Most chunks a placement may hold: ~2 MiB on the wire, half the 4 MiB
// message limit that Assignment and RegisterJobRequest must stay under.
inline constexpr uint64_t kMaxChunks = 65536;

// Cuts every tensor of `spec.tensors`, in spec order, into chunks of
// floor(partition_bytes / 4) elements (the last chunk of a tensor shorter).
// chunk_id is the position in the result, `index` the chunk's position
// within its tensor; `shard` is left 0. Fails with INVALID_ARGUMENT naming
// the field when partition_bytes < 4, there are no tensors, a tensor has no
// name, a duplicate name, or no elements, or there would be more than
// kMaxChunks chunks (checked before any chunk is built).
absl::StatusOr<std::vector<ChunkPlacement>> CutTensorsIntoChunks(
    const JobSpec& spec);

// Places the chunks of `normalized_spec` (tensors and partition_bytes filled,
// see NormalizeJobSpec) on `num_shards` shards: largest chunk first onto the
// shard holding the fewest bytes so far, ties to the lowest shard id (and,
// among equal-sized chunks, the lowest chunk id goes first). Chunks keep
// their ids from CutTensorsIntoChunks. Any two shards' bytes differ by at most
// the largest chunk's bytes. With spec.replication k > 1, each chunk's
// backups are the k - 1 shards after its primary on the ring (shard + 1,
// ... mod num_shards), so every shard holds its primaries' bytes plus its
// k - 1 predecessors'. Fails with INVALID_ARGUMENT when num_shards is 0,
// k > num_shards, or CutTensorsIntoChunks fails. Pure function; thread-safe.
// Only the first UsedShards(spec, num_shards) shards get chunks
// (JobSpec.shards; 0 = all); placement.num_shards is the cluster's count.
absl::StatusOr<Placement> PlaceChunks(const JobSpec& normalized_spec,
                                      uint32_t num_shards);

// The shards a spec's chunks go on: spec.shards, or every shard when 0.
uint32_t UsedShards(const JobSpec& spec, uint32_t num_shards);

// `current` (no replicas) re-placed over shards 0 .. used - 1 (`psctl scale
// --shards`), moving few chunks: those on the shards that leave go, largest
// first, to the least loaded shard; then, while the most loaded shard holds
// a chunk smaller than its excess over the least loaded one, the largest
// such chunk moves there. Any two shards' bytes then differ by at most the
// largest chunk's, as PlaceChunks' do, and a placement already balanced
// moves nothing. The result's epoch is current.epoch + 1. INVALID_ARGUMENT
// naming the field for `used` outside [1, num_shards] or replicas.
// Deterministic; pure.
absl::StatusOr<Placement> RePlaceChunks(const Placement& current,
                                        uint32_t used);

}  // namespace ps

#endif  // SERVER_COORDINATOR_PLACEMENT_H_
