// Reading .npz files (numpy's zip of .npy arrays) for warm starts
// (JobSpec.init.from_file): what psctl export writes (core/npz_writer.h)
// and what numpy.savez writes.
//
//   PS_ASSIGN_OR_RETURN(std::vector<NpyArray> arrays,
//                       ReadNpzFile("/data/model.npz"));
//   PS_ASSIGN_OR_RETURN(NpzTensors t,
//                       MatchTensors(arrays, spec.tensors(),
//                       "/data/model.npz"));
//   absl::Span<const float> w = t.at("fc0/w");
//
// Accepted: a zip whose entries are stored (not compressed), without zip64,
// each "<name>.npy" in .npy format 1.0, 2.0 or 3.0. Every offset and length
// is bounds-checked and every entry's CRC-32 compared, so a truncated,
// corrupt or foreign file is refused with an error naming the file (and the
// entry), never a crash. Pure functions; thread-safe.
#ifndef CORE_NPZ_READER_H_
#define CORE_NPZ_READER_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/npz_writer.h"
#include "google/protobuf/repeated_field.h"
#include "proto/job.pb.h"

namespace ps {

// Files above this are refused before they are read (the writer's limit).
inline constexpr uint64_t kMaxNpzBytes = 0xFFFFFFFFull;

// The arrays of an .npz archive held in `bytes`, in archive order.
// INVALID_ARGUMENT saying what is wrong (and in which entry).
absl::StatusOr<std::vector<NpyArray>> DecodeNpz(absl::string_view bytes);

// Reads `path` and decodes it; every error names the file.
absl::StatusOr<std::vector<NpyArray>> ReadNpzFile(const std::string& path);

// Float32 views into `arrays`, by tensor name (borrowed: `arrays` must
// outlive it).
using NpzTensors = absl::flat_hash_map<std::string, absl::Span<const float>>;

// Every tensor of `tensors` in `arrays`: an array of the same name, dtype
// float32 little-endian ("<f4"), C order, and the tensor's shape; arrays
// of other names are ignored. INVALID_ARGUMENT naming the tensor and
// `source` otherwise.
absl::StatusOr<NpzTensors> MatchTensors(
    const std::vector<NpyArray>& arrays,
    const google::protobuf::RepeatedPtrField<TensorSpec>& tensors,
    absl::string_view source);

}  // namespace ps

#endif  // CORE_NPZ_READER_H_
