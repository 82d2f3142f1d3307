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

uint32_t UsedShards(const JobSpec& spec, uint32_t num_shards) {
  return spec.shards() == 0 ? num_shards : std::min(spec.shards(), num_shards);
}

absl::StatusOr<Placement> PlaceChunks(const JobSpec& normalized_spec,
                                      uint32_t num_shards) {
  if (num_shards == 0) {
    return absl::InvalidArgumentError("num_shards: must be >= 1");
  }
  if (normalized_spec.shards() > num_shards) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shards: %d, but the cluster has %d",
                        normalized_spec.shards(), num_shards));
  }
  const uint32_t used = UsedShards(normalized_spec, num_shards);
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
  for (uint32_t s = 0; s < used; ++s) loads.push({0, s});
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
  if (k > used) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "replication: %d copies need %d shards, got %d", k, k, used));
  }
  for (ChunkPlacement& c : chunks) {
    for (uint32_t j = 1; j < k; ++j) c.add_backups((c.shard() + j) % used);
  }

  Placement placement;
  placement.set_num_shards(num_shards);
  for (ChunkPlacement& c : chunks) *placement.add_chunks() = std::move(c);
  return placement;
}

namespace {

// Per shard id < used: its bytes and its chunks' indexes.
struct ShardLoads {
  std::vector<uint64_t> bytes;
  std::vector<std::set<std::pair<uint64_t, uint32_t>>> chunks;  // (bytes, i)

  explicit ShardLoads(uint32_t used) : bytes(used), chunks(used) {}
  void Add(uint32_t shard, uint64_t size, uint32_t i) {
    bytes[shard] += size;
    chunks[shard].insert({size, i});
  }
  void Remove(uint32_t shard, uint64_t size, uint32_t i) {
    bytes[shard] -= size;
    chunks[shard].erase({size, i});
  }
  // The least loaded shard (lowest id on ties), and the most (lowest id).
  uint32_t Least() const {
    return static_cast<uint32_t>(std::min_element(bytes.begin(), bytes.end()) -
                                 bytes.begin());
  }
  uint32_t Most() const {
    return static_cast<uint32_t>(std::max_element(bytes.begin(), bytes.end()) -
                                 bytes.begin());
  }
};

}  // namespace

absl::StatusOr<Placement> RePlaceChunks(const Placement& current,
                                        uint32_t used) {
  const uint32_t num_shards = current.num_shards();
  if (used == 0 || used > num_shards) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shards: %d is outside [1, %d] (the cluster's shards)",
                        used, num_shards));
  }
  for (const ChunkPlacement& c : current.chunks()) {
    if (c.backups_size() > 0) {
      return absl::InvalidArgumentError(
          "replication: a job with replicas is not re-placed yet");
    }
  }
  Placement next = current;
  next.set_epoch(current.epoch() + 1);
  ShardLoads loads(used);
  std::vector<uint32_t> orphans;  // chunks on shards >= used
  for (uint32_t i = 0; i < static_cast<uint32_t>(next.chunks_size()); ++i) {
    const ChunkPlacement& c = next.chunks(i);
    if (c.shard() < used) {
      loads.Add(c.shard(), c.length() * 4, i);
    } else {
      orphans.push_back(i);
    }
  }
  // The chunks of the shards that leave, largest first, to the least loaded.
  std::stable_sort(orphans.begin(), orphans.end(), [&](uint32_t a, uint32_t b) {
    return next.chunks(a).length() > next.chunks(b).length();
  });
  for (uint32_t i : orphans) {
    const uint32_t to = loads.Least();
    next.mutable_chunks(i)->set_shard(to);
    loads.Add(to, next.chunks(i).length() * 4, i);
  }
  // Then, while the most loaded shard holds a chunk smaller than its excess
  // over the least loaded one, the largest such chunk moves there: each move
  // lowers the sum of squared loads, so this ends, and only chunks that
  // narrow the spread move.
  for (;;) {
    const uint32_t from = loads.Most();
    const uint32_t to = loads.Least();
    const uint64_t gap = loads.bytes[from] - loads.bytes[to];
    const auto& held = loads.chunks[from];
    auto it = held.lower_bound({gap, 0});
    if (it == held.begin()) break;
    --it;  // the largest chunk (highest index on ties) smaller than the gap
    if (it->first == 0) break;
    const auto [size, i] = *it;
    loads.Remove(from, size, i);
    loads.Add(to, size, i);
    next.mutable_chunks(i)->set_shard(to);
  }
  return next;
}

}  // namespace ps
