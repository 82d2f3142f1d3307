#include "server/coordinator/placement.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <queue>
#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ps {

absl::StatusOr<std::vector<ChunkPlacement>> CutTensorsIntoChunks(
    const JobSpec& spec) {
  const uint64_t per_chunk = spec.partition_bytes() / 4;
  if (per_chunk == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "partition_bytes: must be >= 4, got %d", spec.partition_bytes()));
  }
  if (spec.tensors_size() == 0) {
    return absl::InvalidArgumentError(
        "tensors: empty (normalize the spec before placing it)");
  }
  // Validate everything and count first, so a huge spec fails before any
  // allocation.
  std::vector<uint64_t> elements(spec.tensors_size());
  std::set<std::string> names;
  uint64_t total_chunks = 0;
  for (int t = 0; t < spec.tensors_size(); ++t) {
    const TensorSpec& tensor = spec.tensors(t);
    if (tensor.name().empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("tensors[%d].name: must be set", t));
    }
    if (!names.insert(tensor.name()).second) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tensors[%d].name: duplicate name \"%s\"", t, tensor.name()));
    }
    uint64_t n = tensor.shape_size() == 0 ? 0 : 1;
    for (uint64_t d : tensor.shape()) {
      if (d != 0 && n > std::numeric_limits<uint64_t>::max() / d) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "tensors[%d].shape: element count of \"%s\" overflows", t,
            tensor.name()));
      }
      n *= d;
    }
    if (n == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tensors[%d].shape: \"%s\" has no elements", t, tensor.name()));
    }
    elements[t] = n;
    total_chunks += (n - 1) / per_chunk + 1;
    if (total_chunks > kMaxChunks) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "partition_bytes: more than %d chunks of %d bytes; raise it",
          kMaxChunks, per_chunk * 4));
    }
  }

  std::vector<ChunkPlacement> chunks;
  chunks.reserve(total_chunks);
  for (int t = 0; t < spec.tensors_size(); ++t) {
    uint32_t index = 0;
    for (uint64_t offset = 0; offset < elements[t]; offset += per_chunk) {
      ChunkPlacement c;
      c.set_chunk_id(static_cast<uint32_t>(chunks.size()));
      c.set_tensor(spec.tensors(t).name());
      c.set_index(index++);
      c.set_offset(offset);
      c.set_length(std::min(per_chunk, elements[t] - offset));
      chunks.push_back(std::move(c));
    }
  }
  return chunks;
}

absl::StatusOr<Placement> PlaceChunks(const JobSpec& normalized_spec,
                                      uint32_t num_shards) {
  if (num_shards == 0) {
    return absl::InvalidArgumentError("num_shards: must be >= 1");
  }
  absl::StatusOr<std::vector<ChunkPlacement>> chunks =
      CutTensorsIntoChunks(normalized_spec);
  if (!chunks.ok()) return chunks.status();

  // Longest-processing-time-first: the classic greedy for balancing loads;
  // the final loads differ by at most the size of one chunk.
  std::vector<uint32_t> order(chunks->size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return (*chunks)[a].length() > (*chunks)[b].length();
  });
  using Load = std::pair<uint64_t, uint32_t>;  // (bytes, shard id)
  // Min-heap on (bytes, shard): the pair order breaks ties to the lowest id.
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> loads;
  for (uint32_t s = 0; s < num_shards; ++s) loads.push({0, s});
  for (uint32_t i : order) {
    Load least = loads.top();
    loads.pop();
    (*chunks)[i].set_shard(least.second);
    least.first += (*chunks)[i].length() * 4;
    loads.push(least);
  }

  Placement placement;
  placement.set_num_shards(num_shards);
  for (ChunkPlacement& c : *chunks) *placement.add_chunks() = std::move(c);
  return placement;
}

}  // namespace ps
