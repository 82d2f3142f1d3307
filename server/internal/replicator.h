// Replication after aggregation (JobSpec.replication > 1, docs/OPERATIONS.md
// "Replication"): after an update (a BSP step, an ASP/SSP push) is applied
// to a chunk this shard is the acting primary of, the Replicator forwards
// the chunk's state (values, optimizer state, version; ASP/SSP also the
// (worker, step) dedupe state) to every live backup over the shards'
// Replicate RPC, and raises the chunk's replicated version once they all
// acknowledged it; an answer waits for its chunks' (Waiter::need_replicated:
// a BSP answer for the version it carries, an ASP/SSP push for the one it
// produced). A backup takes a forward with ApplyReplica.
//
//   Replicator replicator(options, view);
//   replicator.SetSender(send);       // psd: gRPC to the backups
//   replicator.Notify(job);           // after an apply; never blocks
//
// A forward that fails is retried every `retry` until it succeeds or the
// coordinator fails the backup (the view's epoch moves): the backup is then
// dropped from the acknowledgement set, logged and counted
// (JobStats.replica_drops), never silently. A backup that keeps failing
// forwards while it answers the coordinator (it falls behind) is reported
// by Lagging in the heartbeat's answer, and the coordinator fails it. One
// thread forwards for every job, in the order they were notified.
//
// Re-replication: a shard back after a failover is `joining` in the view.
// It gets every chunk it holds a copy of (the pre-copy), then each chunk
// again whenever its version moved past what it acknowledged (the updates
// made during the copy), without the answers waiting for it; the
// coordinator makes it a backup (`rejoined`, waited for) once every acting
// primary reports it caught up (Behind, in the heartbeat's answer).
//
// Thread safety: every method may be called concurrently; Notify never
// blocks; the destructor stops the thread (a forward in flight ends within
// its deadline).
#ifndef SERVER_INTERNAL_REPLICATOR_H_
#define SERVER_INTERNAL_REPLICATOR_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/ps.pb.h"
#include "server/internal/job.h"
#include "server/internal/replica_view.h"

namespace ps {
namespace internal {

// Sends `req` to the shard at `address`, blocking up to `deadline`.
using ReplicaSender = std::function<absl::Status(const std::string& address,
                                                 const ReplicateRequest& req,
                                                 absl::Time deadline)>;

class Replicator {
 public:
  struct Options {
    // Deadline of one forward (ShardOptions.replicate_deadline).
    absl::Duration deadline = absl::Seconds(1);
    // Wait between tries of a failed forward, unless the view moves first.
    absl::Duration retry = absl::Milliseconds(50);
  };

  Replicator(Options options, std::shared_ptr<const ReplicaView> view);
  ~Replicator();

  Replicator(const Replicator&) = delete;
  Replicator& operator=(const Replicator&) = delete;

  // How forwards travel; call before the first Notify. Unset: every
  // forward fails UNAVAILABLE.
  void SetSender(ReplicaSender sender) ABSL_LOCKS_EXCLUDED(mu_);

  // `job` (replicated) has chunks whose version moved, or the view moved:
  // forward what the backups lack. Starts the thread on first use.
  void Notify(const std::shared_ptr<Job>& job) ABSL_LOCKS_EXCLUDED(mu_);

  // Stops the thread after the forward in flight. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // The live backups (the view's, in some acknowledgement set) whose
  // forwards have failed without a success since at least `now - lag`
  // (SetReplicaViewResponse.lagging).
  std::vector<uint32_t> Lagging(absl::Duration lag, absl::Time now) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // `shard` (re)joins: its earlier failures no longer count.
  void ForgetFailures(uint32_t shard) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop();
  // Forwards until the backups have every served chunk's version, the job
  // closes or Stop.
  void CatchUp(Job& job);
  // One pass: true once every live backup acknowledged; `epoch` the view's
  // epoch it used.
  bool ForwardOnce(Job& job, uint64_t* epoch);
  bool stopping() const ABSL_LOCKS_EXCLUDED(mu_);
  // Notes how a forward to `backup` ended.
  void Record(uint32_t backup, bool ok) ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  const std::shared_ptr<const ReplicaView> view_;

  mutable absl::Mutex mu_;
  ReplicaSender sender_ ABSL_GUARDED_BY(mu_);
  std::deque<std::shared_ptr<Job>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  // By backup: when its forwards started failing (no success since).
  std::map<uint32_t, absl::Time> failing_since_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// Backup side: checks `req` against `job` and the view (fencing: an epoch
// older than the view's is FAILED_PRECONDITION, a newer one UNAVAILABLE so
// the sender retries once this shard heard of it; a chunk not held here,
// one this shard is acting primary of, one whose acting primary is not
// req.from_shard, or a wrong size: INVALID_ARGUMENT or FAILED_PRECONDITION
// naming the field), then stores every chunk newer than what it holds.
// Nothing changes unless the whole request is good.
absl::Status ApplyReplica(Job& job, const ReplicateRequest& req);

// Of the view's joining shards, those that lack a chunk `job` serves here
// at its current version (SetReplicaViewResponse.behind).
std::vector<uint32_t> Behind(const Job& job, const ReplicaView& view);

// `shard` (re)joins empty: none of its acknowledgements count any more.
void ForgetAcks(Job& job, uint32_t shard);

}  // namespace internal
}  // namespace ps

#endif  // SERVER_INTERNAL_REPLICATOR_H_
