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
#include "common/status_macros.h"
#include "core/chunking.h"

namespace ps {

absl::StatusOr<std::vector<ChunkPlacement>> CutTensorsIntoChunks(
    const JobSpec& spec) {
  if (spec.tensors_size() == 0) {
    return absl::InvalidArgumentError(
        "tensors: empty (normalize the spec before placing it)");
  }
  PS_RETURN_IF_ERROR(ValidateTensors(spec));
  // Count first, so a huge spec fails before any allocation.
  const uint64_t per_chunk = ChunkElements(spec);
  uint64_t total_chunks = 0;
  for (const TensorSpec& tensor : spec.tensors()) {
    total_chunks += (NumElements(tensor) - 1) / per_chunk + 1;
  }
  if (total_chunks > kMaxChunks) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "partition_bytes: more than %d chunks of %d bytes; raise it",
        kMaxChunks, per_chunk * 4));
  }
  // The shards check a placement against exactly this cut (server/chunking).
  return CutIntoChunks(spec);
}

absl::StatusOr<Placement> PlaceChunks(const JobSpec& normalized_spec,
                                      uint32_t num_shards) {
  if (num_shards == 0) {
    return absl::InvalidArgumentError("num_shards: must be >= 1");
  }
  PS_ASSIGN_OR_RETURN(std::vector<ChunkPlacement> chunks,
                      CutTensorsIntoChunks(normalized_spec));

  // Longest-processing-time-first: the classic greedy for balancing loads;
  // the final loads differ by at most the size of one chunk.
  std::vector<uint32_t> order(chunks.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return chunks[a].length() > chunks[b].length();
  });
  using Load = std::pair<uint64_t, uint32_t>;  // (bytes, shard id)
  // Min-heap on (bytes, shard): the pair order breaks ties to the lowest id.
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> loads;
  for (uint32_t s = 0; s < num_shards; ++s) loads.push({0, s});
  for (uint32_t i : order) {
    Load least = loads.top();
    loads.pop();
    chunks[i].set_shard(least.second);
    least.first += chunks[i].length() * 4;
    loads.push(least);
  }

  // Backups on the next shards of the ring: all of a shard's chunks fail
  // over to one successor (a pure address change for the workers), and each
  // shard's bytes are its own primaries' plus its k - 1 predecessors',
  // balanced as those are.
  const uint32_t k = std::max<uint32_t>(normalized_spec.replication(), 1);
  if (k > num_shards) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "replication: %d copies need %d shards, got %d", k, k, num_shards));
  }
  for (ChunkPlacement& c : chunks) {
    for (uint32_t j = 1; j < k; ++j)
      c.add_backups((c.shard() + j) % num_shards);
  }

  Placement placement;
  placement.set_num_shards(num_shards);
  for (ChunkPlacement& c : chunks) *placement.add_chunks() = std::move(c);
  return placement;
}

}  // namespace ps
