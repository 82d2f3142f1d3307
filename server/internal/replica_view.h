// ReplicaView: which shards the coordinator failed over, as this shard was
// last told (SetReplicaView), for replicated jobs (JobSpec.replication > 1).
// A chunk's acting primary is the first shard of (primary, backups...) that
// is in service (neither failed, joining nor rejoined), else the first
// rejoined one; only it takes pushes and pulls and forwards to the others
// not failed. A joining shard (back after a failover, copying its replicas
// in) is forwarded to, and waited for only per chunk once caught up on it
// (Chunk::synced, replicator.h); a rejoined one is a backup again.
//
//   ReplicaView view(/*self=*/1);
//   PS_RETURN_IF_ERROR(view.Set(request));  // epochs only grow
//   if (view.ActingPrimary(chunk.placement) == 1) { ... serve it ... }
//
// Thread-safe; every method takes one leaf mutex briefly and never blocks
// otherwise, except WaitForChange (bounded by its deadline).
#ifndef SERVER_INTERNAL_REPLICA_VIEW_H_
#define SERVER_INTERNAL_REPLICA_VIEW_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/job.pb.h"
#include "proto/ps.pb.h"

namespace ps {
namespace internal {

// No shard: every copy of a chunk failed.
inline constexpr uint32_t kNoShard = UINT32_MAX;

class ReplicaView {
 public:
  explicit ReplicaView(uint32_t self) : self_(self) {}

  // Takes the coordinator's view. FAILED_PRECONDITION (nothing changed) for
  // an epoch older than the one held; the same epoch again only refreshes
  // the addresses. Returns whether the epoch moved.
  absl::StatusOr<bool> Set(const SetReplicaViewRequest& req)
      ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t epoch() const ABSL_LOCKS_EXCLUDED(mu_);
  bool Failed(uint32_t shard) const ABSL_LOCKS_EXCLUDED(mu_);
  // The first of (p.shard(), p.backups()...) not failed, or kNoShard.
  uint32_t ActingPrimary(const ChunkPlacement& p) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The copies of `p` other than this shard that are neither failed nor
  // joining: those the acting primary's answers wait for.
  std::vector<uint32_t> LiveBackups(const ChunkPlacement& p) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The copies of `p` other than this shard that are joining: forwarded to,
  // waited for only once synced (Chunk::synced).
  std::vector<uint32_t> JoiningBackups(const ChunkPlacement& p) const
      ABSL_LOCKS_EXCLUDED(mu_);
  bool Joining(uint32_t shard) const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<uint32_t> joining() const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether a view was taken since this process started, and the
  // incarnation the last one named for this shard (0: none).
  bool heard() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t told_incarnation() const ABSL_LOCKS_EXCLUDED(mu_);
  // The address the coordinator gave for `shard` ("" when unknown).
  std::string Address(uint32_t shard) const ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until the epoch is past `epoch` or `deadline`; the epoch now.
  uint64_t WaitForChange(uint64_t epoch, absl::Time deadline) const
      ABSL_LOCKS_EXCLUDED(mu_);
  uint32_t self() const { return self_; }

 private:
  bool FailedLocked(uint32_t shard) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool JoiningLocked(uint32_t shard) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool RejoinedLocked(uint32_t shard) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint32_t self_;
  mutable absl::Mutex mu_;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  bool heard_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t told_incarnation_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint32_t> failed_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> joining_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> rejoined_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> addresses_ ABSL_GUARDED_BY(mu_);
};

}  // namespace internal
}  // namespace ps

#endif  // SERVER_INTERNAL_REPLICA_VIEW_H_
