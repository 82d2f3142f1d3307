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
// the largest chunk's bytes. Only the shards of ShardSet(spec, num_shards)
// get chunks (JobSpec.shards, 0 = all, or JobSpec.shard_ids; CheckShardSet's
// refusals first); placement.num_shards is the cluster's count, and a
// job with tables (replication 1) on fewer shards has its rows there too
// (Placement.table_shards = that set). With
// spec.replication k > 1, each chunk's backups are the k - 1 shards after
// its primary on the ring of that set (ascending, wrapping around; not the
// cluster's ring), so every shard holds its primaries' bytes plus its k - 1
// predecessors' in the set. Fails with INVALID_ARGUMENT when num_shards is
// 0, k > the set's size, or CutTensorsIntoChunks fails. Pure function;
// thread-safe.
absl::StatusOr<Placement> PlaceChunks(const JobSpec& normalized_spec,
                                      uint32_t num_shards);

// How many shards a spec's chunks go on: the size of spec.shard_ids when
// set, else spec.shards, or every shard when 0.
uint32_t UsedShards(const JobSpec& spec, uint32_t num_shards);

// The shards a spec's chunks go on, ascending: spec.shard_ids when set,
// else 0 .. UsedShards - 1.
std::vector<uint32_t> ShardSet(const JobSpec& spec, uint32_t num_shards);

// OK, or INVALID_ARGUMENT naming the field: `shards` past num_shards, a
// shard id past it or named twice, or `shards` set and not the size of
// `shard_ids`. Pure.
absl::Status CheckShardSet(const JobSpec& spec, uint32_t num_shards);

// Whether `shards` (ascending) is 0 .. n - 1: a set JobSpec.shards names.
bool IsFirstShards(const std::vector<uint32_t>& shards);

// The spec's shard fields for `shards` (ascending, non-empty): `shards`
// set to its size, and shard_ids to it unless IsFirstShards.
void SetShardSet(const std::vector<uint32_t>& shards, JobSpec* spec);

// `current` re-placed over shards 0 .. used - 1 (`psctl scale
// --shards` of a job on the first shards), moving few chunks: those on the
// shards that leave go, largest first, to the least loaded shard; then, while
// the most loaded shard holds a chunk smaller than its excess over the least
// loaded one, the largest such chunk moves there. Any two shards' bytes then
// differ by at most the largest chunk's, as PlaceChunks' do, and a placement
// already balanced moves nothing. The result's epoch is current.epoch + 1.
// INVALID_ARGUMENT naming the field for `used` outside [1, num_shards].
// Deterministic; pure. RePlaceChunksOnto(current, {0, ..., used - 1}).
absl::StatusOr<Placement> RePlaceChunks(const Placement& current,
                                        uint32_t used);

// `current` re-placed over the shards of `shards` (ascending, distinct, each
// below current.num_shards; `psctl scale --drain`) by RePlaceChunks' rule:
// the chunks on shards not in the set go, largest first, to the least
// loaded shard of the set (lowest id on ties), then the set is evened out.
// Chunks already on a shard of the set stay unless evening out moves them.
// With replicas (k copies of each chunk, k > 1) the result keeps
// PlaceChunks' ring over the new set: the chunk whose primary is the i-th
// shard of `shards` has its backups on the next k - 1 (mod the set's
// size), so all of one primary's chunks fail over to one successor. Each
// chunk first takes the primary whose ring adds the fewest copies it did
// not hold (its own on ties, then the lowest); then the primaries' bytes
// are evened out as above, each move taking, among the chunks that fit,
// the one adding the fewest copies. Any two shards' primary bytes then
// differ by at most the largest chunk's (their bytes counting every copy,
// by k times that), and a copy already on its shard stays there (it is
// not fetched). INVALID_ARGUMENT naming `shards` for an empty set, an id
// past the cluster, not ascending or repeated; `replication` for a set
// smaller than k; `placement.chunks[i].backups` for chunks with unequal
// copy counts.
absl::StatusOr<Placement> RePlaceChunksOnto(
    const Placement& current, const std::vector<uint32_t>& shards);

}  // namespace ps

#endif  // SERVER_COORDINATOR_PLACEMENT_H_
