// The copies of a replicated job (JobSpec.replication > 1) across a live
// re-placement (reshard.h): which shards may take part, where a copy a
// shard gains comes from, how a copy it keeps in another role is carried
// over, and what the new job's copies know of each other at COMMIT.
//
// Under a BSP pause every copy of every chunk reaches the pause step B
// before the shard holding it reports quiesced (a backup's chunks are in
// its job's `chunks` too), so when PREPARE runs all copies are bitwise
// equal at version B (a backup applies each step's gradient with the
// job's optimizer as the primary did, or stores its state). The new job's
// copies start from those: each one its primary forwards to holds its
// version already.
//
//   PS_RETURN_IF_ERROR(CheckCopiesInService(job, req.placement()));
//   const uint32_t from = CopySource(old, old.placement.chunks(id));
//   std::shared_ptr<Chunk> c = CopyLocally(old, *held, next, p, active);
//   MarkCopiesInSync(*c);  // every copy of the new placement prepared
//
// Thread safety: as each function states.
#ifndef SERVER_INTERNAL_RESHARD_REPLICAS_H_
#define SERVER_INTERNAL_RESHARD_REPLICAS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "proto/job.pb.h"
#include "server/internal/job.h"

namespace ps {
namespace internal {

// Whether `shard` holds a copy (primary or backup) of `p`.
bool HoldsCopyOf(const ChunkPlacement& p, uint32_t shard);

// Whether the two placements of a chunk name the same copies in the same
// order (a chunk shared by the old and the new job keeps its
// acknowledgement state, which is indexed by copy).
bool SameCopies(const ChunkPlacement& a, const ChunkPlacement& b);

// Replicated `job`: FAILED_PRECONDITION naming the shard when one holding
// a copy under `placement` is failed over or joining in the job's view
// (its copies are not in sync; move the job once it rejoined). OK
// otherwise and for jobs without replicas. Reads the view only.
absl::Status CheckCopiesInService(const Job& job, const Placement& placement);

// The shard a copy of `p` (under `job`'s placement) is fetched from: its
// acting primary for a replicated job (kNoShard when none), else its
// shard.
uint32_t CopySource(const Job& job, const ChunkPlacement& p);

// A new chunk under placement `p` with the state of `held` (a copy `old`
// holds here under another placement of its copies), copied on this
// shard: no fetch. Takes held.mu.
std::shared_ptr<Chunk> CopyLocally(const Job& old, Chunk& held, Job& next,
                                   const ChunkPlacement& p,
                                   const std::vector<uint8_t>& active);

// A chunk of the new job that is not shared with the old one: every copy
// of it holds its version (all were prepared at it before COMMIT), so its
// acting primary forwards only later versions and answers need no
// acknowledgement of this one. Lock-free.
void MarkCopiesInSync(Chunk& c);

}  // namespace internal
}  // namespace ps

#endif  // SERVER_INTERNAL_RESHARD_REPLICAS_H_
