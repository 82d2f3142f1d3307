#include "server/coordinator/placement.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
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
  if (spec.shard_ids_size() > 0) return spec.shard_ids_size();
  return spec.shards() == 0 ? num_shards : std::min(spec.shards(), num_shards);
}

std::vector<uint32_t> ShardSet(const JobSpec& spec, uint32_t num_shards) {
  std::vector<uint32_t> shards(spec.shard_ids().begin(),
                               spec.shard_ids().end());
  if (shards.empty()) {
    shards.resize(UsedShards(spec, num_shards));
    std::iota(shards.begin(), shards.end(), 0);
  }
  std::sort(shards.begin(), shards.end());
  return shards;
}

absl::Status CheckShardSet(const JobSpec& spec, uint32_t num_shards) {
  if (spec.shards() > num_shards) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "shards: %d, but the cluster has %d", spec.shards(), num_shards));
  }
  if (spec.shard_ids_size() == 0) return absl::OkStatus();
  std::vector<bool> named(num_shards, false);
  for (int i = 0; i < spec.shard_ids_size(); ++i) {
    const uint32_t id = spec.shard_ids(i);
    if (id >= num_shards) {
      return absl::InvalidArgumentError(
          absl::StrFormat("shard_ids[%d]: %d, but the cluster has %d shards", i,
                          id, num_shards));
    }
    if (named[id]) {
      return absl::InvalidArgumentError(
          absl::StrFormat("shard_ids[%d]: shard %d named twice", i, id));
    }
    named[id] = true;
  }
  if (spec.shards() != 0 &&
      spec.shards() != static_cast<uint32_t>(spec.shard_ids_size())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "shards: %d, but shard_ids names %d shards (set one, or both alike)",
        spec.shards(), spec.shard_ids_size()));
  }
  return absl::OkStatus();
}

bool IsFirstShards(const std::vector<uint32_t>& shards) {
  for (uint32_t i = 0; i < shards.size(); ++i) {
    if (shards[i] != i) return false;
  }
  return true;
}

void SetShardSet(const std::vector<uint32_t>& shards, JobSpec* spec) {
  spec->set_shards(static_cast<uint32_t>(shards.size()));
  spec->clear_shard_ids();
  if (IsFirstShards(shards)) return;
  for (uint32_t s : shards) spec->add_shard_ids(s);
}

absl::StatusOr<Placement> PlaceChunks(const JobSpec& normalized_spec,
                                      uint32_t num_shards) {
  if (num_shards == 0) {
    return absl::InvalidArgumentError("num_shards: must be >= 1");
  }
  PS_RETURN_IF_ERROR(CheckShardSet(normalized_spec, num_shards));
  const std::vector<uint32_t> shards = ShardSet(normalized_spec, num_shards);
  const uint32_t used = static_cast<uint32_t>(shards.size());
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
  for (uint32_t s : shards) loads.push({0, s});
  for (uint32_t i : order) {
    Load least = loads.top();
    loads.pop();
    chunks[i].set_shard(least.second);
    least.first += chunks[i].length() * 4;
    loads.push(least);
  }

  // Backups on the next shards of the job's ring (its shards, ascending;
  // not the cluster's): all of a shard's chunks fail over to one successor
  // (a pure address change for the job's workers, ReplicaMonitor::Redirect),
  // and each shard's bytes are its own primaries' plus its k - 1
  // predecessors', balanced as those are.
  const uint32_t k = std::max<uint32_t>(normalized_spec.replication(), 1);
  if (k > used) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "replication: %d copies need %d shards, got %d", k, k, used));
  }
  std::vector<uint32_t> position(num_shards, 0);  // in `shards`, by id
  for (uint32_t i = 0; i < used; ++i) position[shards[i]] = i;
  for (ChunkPlacement& c : chunks) {
    for (uint32_t j = 1; j < k; ++j) {
      c.add_backups(shards[(position[c.shard()] + j) % used]);
    }
  }

  Placement placement;
  placement.set_num_shards(num_shards);
  for (ChunkPlacement& c : chunks) *placement.add_chunks() = std::move(c);
  // The rows go on the job's shards too (a replicated job's stay on every
  // shard: their copies follow the cluster's ring).
  if (normalized_spec.tables_size() > 0 && k == 1 && used < num_shards) {
    for (uint32_t s : shards) placement.add_table_shards(s);
  }
  return placement;
}

namespace {

// Per shard id: its bytes and its chunks' indexes; only the shards of the
// new set (`members`, ascending) take chunks.
struct ShardLoads {
  std::vector<uint32_t> members;
  std::vector<uint64_t> bytes;
  std::vector<std::set<std::pair<uint64_t, uint32_t>>> chunks;  // (bytes, i)

  ShardLoads(std::vector<uint32_t> set, uint32_t num_shards)
      : members(std::move(set)), bytes(num_shards), chunks(num_shards) {}
  void Add(uint32_t shard, uint64_t size, uint32_t i) {
    bytes[shard] += size;
    chunks[shard].insert({size, i});
  }
  void Remove(uint32_t shard, uint64_t size, uint32_t i) {
    bytes[shard] -= size;
    chunks[shard].erase({size, i});
  }
  // The least loaded member (lowest id on ties), and the most (lowest id).
  uint32_t Least() const {
    uint32_t best = members.front();
    for (uint32_t s : members) best = bytes[s] < bytes[best] ? s : best;
    return best;
  }
  uint32_t Most() const {
    uint32_t best = members.front();
    for (uint32_t s : members) best = bytes[s] > bytes[best] ? s : best;
    return best;
  }
};

absl::Status CheckTargetSet(const std::vector<uint32_t>& shards,
                            uint32_t num_shards) {
  if (shards.empty()) {
    return absl::InvalidArgumentError("shards: none left to hold the chunks");
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    if (shards[i] >= num_shards) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "shards: %d is past the cluster's %d shards", shards[i], num_shards));
    }
    if (i > 0 && shards[i] <= shards[i - 1]) {
      return absl::InvalidArgumentError(
          "shards: the set must be ascending, each shard once");
    }
  }
  return absl::OkStatus();
}

// The copies of `p`: (shard, backups...).
std::vector<uint32_t> CopiesOf(const ChunkPlacement& p) {
  std::vector<uint32_t> copies = {p.shard()};
  copies.insert(copies.end(), p.backups().begin(), p.backups().end());
  return copies;
}

// A replicated re-placement's ring over the new set `shards` (ascending):
// the chunk whose primary is shards[i] has its copies on shards[i],
// shards[i + 1], ... (k of them, mod the set's size), as PlaceChunks lays
// them over 0 .. used - 1, so every chunk of one primary fails over to the
// same successor.
struct Ring {
  std::vector<uint32_t> shards;
  uint32_t k = 1;

  uint32_t Copy(uint32_t i, uint32_t j) const {
    return shards[(i + j) % shards.size()];
  }
  // The copies a chunk held before (`old`) lacks with its primary at
  // shards[i]: those a re-placement fetches.
  uint32_t NewCopies(const std::vector<uint32_t>& old, uint32_t i) const {
    uint32_t n = 0;
    for (uint32_t j = 0; j < k; ++j) {
      n += std::find(old.begin(), old.end(), Copy(i, j)) == old.end();
    }
    return n;
  }
};

// Evens out the primaries' bytes (each shard holds its own and its k - 1
// predecessors' on the ring) by RePlaceChunksOnto's rule: among the chunks
// of the most loaded shard smaller than its excess over the least loaded,
// the one whose move adds the fewest copies (largest first) moves there.
// `at`: each chunk's primary as an index into ring.shards; `index`: a
// shard's index there.
void EvenOut(const Ring& ring, const std::vector<uint32_t>& index,
             const std::vector<std::vector<uint32_t>>& old, ShardLoads& loads,
             std::vector<uint32_t>& at) {
  const int k = static_cast<int>(ring.k);
  for (;;) {
    const uint32_t from = loads.Most();
    const uint32_t to = loads.Least();
    const uint64_t gap = loads.bytes[from] - loads.bytes[to];
    const auto& held = loads.chunks[from];
    auto it = held.lower_bound({gap, 0});
    int best_cost = INT32_MAX;
    std::pair<uint64_t, uint32_t> best{0, 0};
    while (it != held.begin()) {
      --it;
      if (it->first == 0) break;
      const uint32_t c = it->second;
      const int cost = static_cast<int>(ring.NewCopies(old[c], index[to])) -
                       static_cast<int>(ring.NewCopies(old[c], index[from]));
      if (cost < best_cost) {
        best_cost = cost;
        best = *it;
      }
      if (cost == -k) break;  // none does better
    }
    // Each move narrows the spread (the chunk is smaller than the gap), so
    // the sum of squared loads falls and this ends.
    if (best_cost == INT32_MAX) return;
    loads.Remove(from, best.first, best.second);
    loads.Add(to, best.first, best.second);
    at[best.second] = index[to];
  }
}

// RePlaceChunksOnto for a placement with replicas (see placement.h).
absl::StatusOr<Placement> RePlaceReplicated(
    const Placement& current, const std::vector<uint32_t>& shards) {
  const uint32_t k = 1 + current.chunks(0).backups_size();
  if (k > shards.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "replication: %d copies need %d shards, got %d", k, k, shards.size()));
  }
  const Ring ring{shards, k};
  std::vector<uint32_t> index(current.num_shards(), UINT32_MAX);
  for (uint32_t i = 0; i < shards.size(); ++i) index[shards[i]] = i;
  const uint32_t n = static_cast<uint32_t>(current.chunks_size());
  std::vector<std::vector<uint32_t>> old(n);
  std::vector<uint32_t> at(n);  // each chunk's primary, as a ring index
  ShardLoads loads(shards, current.num_shards());
  for (uint32_t c = 0; c < n; ++c) {
    const ChunkPlacement& p = current.chunks(c);
    if (p.backups_size() + 1 != static_cast<int>(k)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "placement.chunks[%d].backups: %d, but chunk 0 has %d", c,
          p.backups_size(), k - 1));
    }
    old[c] = CopiesOf(p);
    // The primary adding the fewest copies; its own first, then the
    // lowest in the set.
    const uint32_t own =
        p.shard() < index.size() ? index[p.shard()] : UINT32_MAX;
    uint32_t best = own != UINT32_MAX ? own : 0;
    for (uint32_t i = 0; i < shards.size(); ++i) {
      if (ring.NewCopies(old[c], i) < ring.NewCopies(old[c], best)) best = i;
    }
    at[c] = best;
    loads.Add(shards[best], p.length() * 4, c);
  }
  EvenOut(ring, index, old, loads, at);
  Placement next = current;
  next.set_epoch(current.epoch() + 1);
  for (uint32_t c = 0; c < n; ++c) {
    ChunkPlacement& p = *next.mutable_chunks(c);
    p.set_shard(ring.Copy(at[c], 0));
    p.clear_backups();
    for (uint32_t j = 1; j < k; ++j) p.add_backups(ring.Copy(at[c], j));
  }
  return next;
}

}  // namespace

absl::StatusOr<Placement> RePlaceChunks(const Placement& current,
                                        uint32_t used) {
  const uint32_t num_shards = current.num_shards();
  if (used == 0 || used > num_shards) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shards: %d is outside [1, %d] (the cluster's shards)",
                        used, num_shards));
  }
  std::vector<uint32_t> shards(used);
  std::iota(shards.begin(), shards.end(), 0);
  return RePlaceChunksOnto(current, shards);
}

absl::StatusOr<Placement> RePlaceChunksOnto(
    const Placement& current, const std::vector<uint32_t>& shards) {
  PS_RETURN_IF_ERROR(CheckTargetSet(shards, current.num_shards()));
  if (current.chunks_size() > 0 && current.chunks(0).backups_size() > 0) {
    return RePlaceReplicated(current, shards);
  }
  std::vector<bool> member(current.num_shards(), false);
  for (uint32_t s : shards) member[s] = true;
  Placement next = current;
  next.set_epoch(current.epoch() + 1);
  ShardLoads loads(shards, current.num_shards());
  std::vector<uint32_t> orphans;  // chunks on shards outside the set
  for (uint32_t i = 0; i < static_cast<uint32_t>(next.chunks_size()); ++i) {
    const ChunkPlacement& c = next.chunks(i);
    if (c.shard() < member.size() && member[c.shard()]) {
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
