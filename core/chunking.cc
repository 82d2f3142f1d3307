#include "core/chunking.h"

#include <limits>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/init.h"

namespace ps {
namespace {

// The largest partition_bytes: a chunk must fit in one 4 MiB gRPC message
// with room for the rest of the request.
constexpr uint64_t kLargestPartitionBytes = 3ull << 20;

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

}  // namespace

uint64_t ChunkElements(const JobSpec& spec) {
  const uint64_t bytes = spec.partition_bytes() == 0 ? kDefaultPartitionBytes
                                                     : spec.partition_bytes();
  return bytes / 4 == 0 ? 1 : bytes / 4;
}

uint64_t NumElements(const TensorSpec& tensor) {
  uint64_t n = 1;
  for (uint64_t d : tensor.shape()) n *= d;
  return n;
}

absl::Status ValidateTensors(const JobSpec& spec) {
  const uint64_t pb = spec.partition_bytes();
  if (pb != 0 && (pb % 4 != 0 || pb > kLargestPartitionBytes)) {
    return Bad("partition_bytes",
               absl::StrCat("must be a multiple of 4 in [4, ",
                            kLargestPartitionBytes, "], got ", pb));
  }
  if (spec.tensors_size() == 0) return Bad("tensors", "the job has none");
  const uint64_t per_chunk = ChunkElements(spec);
  uint64_t total_chunks = 0;
  absl::flat_hash_map<std::string, int> seen;
  for (int t = 0; t < spec.tensors_size(); ++t) {
    const TensorSpec& tensor = spec.tensors(t);
    const std::string field = absl::StrCat("tensors[", t, "]");
    if (tensor.name().empty()) return Bad(field + ".name", "must not be empty");
    auto [it, inserted] = seen.emplace(tensor.name(), t);
    if (!inserted) {
      return Bad(field + ".name",
                 absl::StrCat("\"", tensor.name(), "\" also names tensors[",
                              it->second, "]"));
    }
    if (tensor.shape_size() == 0) return Bad(field + ".shape", "is empty");
    uint64_t n = 1;
    for (int i = 0; i < tensor.shape_size(); ++i) {
      const uint64_t d = tensor.shape(i);
      if (d == 0)
        return Bad(absl::StrCat(field, ".shape[", i, "]"), "must be > 0");
      if (n > std::numeric_limits<uint64_t>::max() / 4 / d) {
        return Bad(field + ".shape", "too many elements");
      }
      n *= d;
    }
    if (absl::Status st = ValidateInit(tensor); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".", st.message()));
    }
    total_chunks += (n + per_chunk - 1) / per_chunk;
    if (total_chunks > std::numeric_limits<uint32_t>::max()) {
      return Bad(field + ".shape",
                 "the job would have more than 2^32 chunks; raise "
                 "partition_bytes or shrink the model");
    }
  }
  return absl::OkStatus();
}

std::vector<ChunkPlacement> CutIntoChunks(const JobSpec& spec) {
  const uint64_t per_chunk = ChunkElements(spec);
  std::vector<ChunkPlacement> chunks;
  for (const TensorSpec& tensor : spec.tensors()) {
    const uint64_t n = NumElements(tensor);
    uint32_t index = 0;
    for (uint64_t offset = 0; offset < n; offset += per_chunk, ++index) {
      ChunkPlacement c;
      c.set_chunk_id(static_cast<uint32_t>(chunks.size()));
      c.set_tensor(tensor.name());
      c.set_index(index);
      c.set_offset(offset);
      c.set_length(n - offset < per_chunk ? n - offset : per_chunk);
      chunks.push_back(std::move(c));
    }
  }
  return chunks;
}

}  // namespace ps
