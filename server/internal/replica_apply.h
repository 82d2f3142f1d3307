// The copies of a replicated chunk (JobSpec.replication > 1): which copy a
// shard holds, what it acknowledged, and the backup's side of a forward
// (ApplyReplica). The primary's side is the Replicator (replicator.h).
#ifndef SERVER_INTERNAL_REPLICA_APPLY_H_
#define SERVER_INTERNAL_REPLICA_APPLY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/ps.pb.h"
#include "server/internal/job.h"
#include "server/internal/replica_view.h"

namespace ps {
namespace internal {

// The index of `shard` among (p.shard(), p.backups()...), or -1 (also for
// an index past Chunk::acked).
int CopyIndex(const ChunkPlacement& p, uint32_t shard);

// 1 + the version `shard` acknowledged of `c` (0: none).
uint64_t Acked(const Chunk& c, uint32_t shard);

// What a backup answers a forward from a shard its view failed over (the
// sender is fenced): ABORTED, which gRPC itself never produces. The sender
// stops serving the job at once (Replicator), so that its workers find the
// successor even while the coordinator cannot reach it.
inline constexpr absl::StatusCode kReplicaFencedCode =
    absl::StatusCode::kAborted;

// What a backup answers a forward of a gradient (ReplicaChunk.gradient)
// whose base version it does not hold: the sender forgets what that backup
// acknowledged of those chunks and sends their state.
inline constexpr absl::StatusCode kReplicaBaseCode =
    absl::StatusCode::kOutOfRange;

// The epochs of a forward (ReplicateRequest.epoch, placement_epoch)
// against this shard's view and `job`, as ApplyReplica checks them (below).
absl::Status CheckForwardEpoch(Job& job, const ReplicateRequest& req);
absl::Status CheckPlacementEpoch(Job& job, const ReplicateRequest& req);

// Backup side: checks `req` against `job` and the view (fencing: an epoch
// older than the view's is kReplicaFencedCode if the view failed the
// sender, else FAILED_PRECONDITION (it has not heard the epoch yet); a
// newer one UNAVAILABLE so the sender retries once this shard heard of it;
// a forward of another placement epoch than the job's (Placement.epoch,
// a live re-placement): a newer one UNAVAILABLE, an older one
// FAILED_PRECONDITION; a chunk not held here,
// one this shard is acting primary of, one whose acting primary is not
// req.from_shard, or a wrong size: INVALID_ARGUMENT or FAILED_PRECONDITION
// naming the field), then stores every chunk newer than what it holds (an
// older forward arriving after a newer one changes nothing). Nothing
// changes unless the whole request is good.
absl::Status ApplyReplica(Job& job, const ReplicateRequest& req);

// Writes the chunk's state as a copy stores it into `out` (ASP/SSP: with
// the (worker, step) dedupe state, so a retry of an applied push stays a
// duplicate on the successor); or, under BSP, when the receiver holds the
// version before (`acked`: 1 + its version, as Chunk::acked; 0 = none) and
// the step's gradient is kept, that gradient and its scale
// (ReplicaChunk.gradient: the receiver applies it itself). Forwards to
// backups and a re-placement's FetchChunks (acked 0: the state) use it.
void CopyChunk(const Job& job, const Chunk& c, uint64_t acked,
               ReplicaChunk* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);

// A ReplicaChunk `r` (the request's `field`) against the copy `c` holds:
// the sizes, and for a gradient that `c` holds the version before.
// INVALID_ARGUMENT or kReplicaBaseCode naming `field`, counted as
// bad_replica.
absl::Status CheckReplicaChunk(Job& job, const Chunk& c, const ReplicaChunk& r,
                               const std::string& field)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);

// Stores a checked `r` into `c`: its state, or its gradient applied with
// the job's optimizer as the primary applied it. An older version than the
// one held, or the same but 0, changes nothing.
void StoreReplicaChunk(Job& job, Chunk& c, const ReplicaChunk& r)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);

// Of the view's joining shards, those with a chunk `job` serves here that
// is not yet synced (Chunk::synced) or lacks a version already answered
// (SetReplicaViewResponse.behind).
std::vector<uint32_t> Behind(const Job& job, const ReplicaView& view);

// `shard` (re)joins empty: none of its acknowledgements count any more,
// and what was in flight to it is sent again.
void ForgetAcks(Job& job, uint32_t shard);

}  // namespace internal
}  // namespace ps

#endif  // SERVER_INTERNAL_REPLICA_APPLY_H_
