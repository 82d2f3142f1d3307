// Replication after aggregation (JobSpec.replication > 1, docs/OPERATIONS.md
// "Replication"): after an update (a BSP step, an ASP/SSP push) is applied
// to a chunk this shard is the acting primary of, the Replicator forwards
// the chunk's state (values, optimizer state, version; ASP/SSP also the
// (worker, step) dedupe state) to every live backup over the shards'
// Replicate RPC, and raises the chunk's replicated version once they all
// acknowledged it; an answer waits for its chunks' (Waiter::need_replicated:
// a BSP answer for the version it carries, an ASP/SSP push for the one it
// produced). A backup takes a forward with ApplyReplica (replica_apply.h).
//
//   Replicator replicator(options, view);
//   replicator.SetSender(send);       // psd: gRPC to the backups
//   replicator.Advanced(job, chunks); // after an apply; never blocks
//   replicator.Notify(job);           // the view moved
//
// Forwards are pipelined: as soon as a chunk's version moved, the applying
// thread queues it to every backup that lacks that version (a dispatcher
// thread does the same for a whole job when the view moved). Each backup
// has its own queue, drained by `streams_per_backup` senders, so one
// step's chunks travel while later ones are still being applied, several
// requests are in flight to each backup (its link does not idle while one
// is applied and acknowledged), and the backups are served in parallel.
// A sender copies its chunks' state when it sends them: the newest
// version (ASP/SSP chunks move on every push; a queued chunk is queued
// once), held only while in flight. Each acknowledgement raises its own
// chunks' replicated versions at once, so their answers go out without
// waiting for the rest; a forward in flight is not waited for before a
// newer one (a backup keeps the newest version it got).
//
// A backup whose view failed this shard over refuses its forwards as
// fenced (kReplicaFencedCode): this shard then closes the job (its waits
// fail UNAVAILABLE, so the workers ask the coordinator and follow the
// successor) without waiting to hear the view itself, which a shard cut
// off from the coordinator alone never would.
// A forward that fails otherwise is retried every `retry` until it
// succeeds or the coordinator fails the backup (the view's epoch moves): the
// backup is then dropped from the acknowledgement set, logged and counted
// (JobStats.replica_drops), never silently. A backup that keeps failing
// forwards while it answers the coordinator (it falls behind) is reported
// by Lagging in the heartbeat's answer, and the coordinator fails it.
// A backup that is only slow is not behind: its forwards' deadline grows
// while they run out of time, and it counts as lagging only once one
// given `max_deadline` failed too (or one failed otherwise: refused,
// unreachable); BackupHealth (backup_health.h) keeps that rule.
//
// Re-replication: a shard back after a failover is `joining` in the view.
// It gets every chunk it holds a copy of (the pre-copy), then each chunk
// again whenever its version moved past what it acknowledged (the updates
// made during the copy), without the answers waiting for it until it has
// acknowledged the chunk's version of the moment once: from then on that
// chunk's answers wait for it as for a live backup (Chunk::synced), so a
// chunk caught up stays caught up however fast the job moves. The
// coordinator makes it a backup (`rejoined`, and a candidate to serve)
// once every acting primary reports all its chunks synced and holding
// every answered version (Behind, in the heartbeat's answer); answers after
// that report are on it already, so none is missing should it be promoted
// before the primaries heard of the new view.
//
// Thread safety: every method may be called concurrently; Notify never
// blocks; the destructor stops the threads (a forward in flight ends within
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
#include "absl/types/span.h"
#include "proto/ps.pb.h"
#include "server/internal/backup_health.h"
#include "server/internal/job.h"
#include "server/internal/replica_apply.h"
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
    // Deadline of one forward (ShardOptions.replicate_deadline), and the
    // most it grows to while forwards to a backup run out of time.
    absl::Duration deadline = absl::Seconds(1);
    absl::Duration max_deadline = absl::Seconds(8);
    // Wait between tries of a failed forward, unless the view moves first.
    absl::Duration retry = absl::Milliseconds(50);
    // Requests in flight to one backup at once (>= 1).
    int streams_per_backup = 2;
  };

  Replicator(Options options, std::shared_ptr<const ReplicaView> view);
  ~Replicator();

  Replicator(const Replicator&) = delete;
  Replicator& operator=(const Replicator&) = delete;

  // How forwards travel; call before the first Notify. Unset: every
  // forward fails UNAVAILABLE.
  void SetSender(ReplicaSender sender) ABSL_LOCKS_EXCLUDED(mu_);
  // The sender set (empty: none), for the tables' forwards.
  ReplicaSender sender() const ABSL_LOCKS_EXCLUDED(mu_);

  // `chunks` of `job` (replicated) moved to a new version: queues them to
  // the backups that lack it, on the caller's thread (the apply path; no
  // chunk lock held), and answers at once those with no live backup.
  void Advanced(const std::shared_ptr<Job>& job,
                absl::Span<Chunk* const> chunks) ABSL_LOCKS_EXCLUDED(mu_);

  // `job` (replicated) may have chunks its backups lack (the view moved, a
  // forward failed): the dispatcher thread looks at every chunk and
  // forwards what they lack. Starts the dispatcher on first use.
  void Notify(const std::shared_ptr<Job>& job) ABSL_LOCKS_EXCLUDED(mu_);

  // Stops the threads after the forwards in flight. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // The backups not failed (live or joining: a joining copy's synced chunks
  // hold answers too) whose forwards have failed without a success since
  // at least `now - lag`, the last of them with the full `max_deadline` or
  // otherwise than by running out of time (SetReplicaViewResponse.lagging).
  std::vector<uint32_t> Lagging(absl::Duration lag, absl::Time now) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // `shard` (re)joins: its earlier failures no longer count. This shard
  // itself: it rejoins empty, so none of its forwards' failures count (a
  // fenced primary's refused forwards must not report a live backup).
  void ForgetFailures(uint32_t shard) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // One chunk on its way to one backup (copied when its request is sent).
  struct Forward {
    std::shared_ptr<Job> job;
    Chunk* chunk = nullptr;  // owned by `job`
    uint64_t epoch = 0;      // the view's when it was dispatched
  };
  // One backup's queue; its senders take batches from the front.
  struct Stream {
    uint32_t backup = 0;
    std::deque<Forward> queue;
    std::vector<std::thread> senders;
    // The epoch a failed forward to it was last logged at.
    uint64_t logged_epoch = UINT64_MAX;
  };

  // The dispatcher: takes notified jobs and queues what their backups lack.
  void Loop();
  void Dispatch(const std::shared_ptr<Job>& job);
  // Queues `c` to each backup lacking its version, unless already on its way.
  void Queue(const std::shared_ptr<Job>& job, Chunk& c, uint64_t epoch);
  // Queues `f` to `backup` unless its chunk is queued there already.
  void Enqueue(uint32_t backup, Forward f) ABSL_LOCKS_EXCLUDED(mu_);
  // The forward of `f`'s chunk waiting in `stream`'s queue, or nullptr.
  Forward* Queued(Stream& stream, const Forward& f)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A sender of `stream`: sends batches from its queue until Stop.
  void Send(Stream* stream) ABSL_LOCKS_EXCLUDED(mu_);
  // Send's request for `batch` to `backup`: each chunk's state or step
  // gradient (CopyChunk), marked as forwarding.
  ReplicateRequest CopyBatch(Job& job, std::vector<Forward>& batch,
                             uint32_t backup);
  // `req` (of `batch`) will not reach `backup`: its chunks may be queued
  // to it again.
  void Unforwarded(std::vector<Forward>& batch, const ReplicateRequest& req,
                   uint32_t backup);
  // `backup` took `req`: raises what it acknowledged and releases the
  // answers that waited for it.
  void Acknowledged(Job& job, std::vector<Forward>& batch,
                    const ReplicateRequest& req, uint32_t backup);
  // The next batch of `stream` (one job and epoch, under the message
  // bound); empty once stopping.
  std::vector<Forward> TakeBatch(Stream* stream) ABSL_LOCKS_EXCLUDED(mu_);
  // A forward of `batch` (sent as `req`) to stream->backup failed with `s`:
  // after `retry` the same chunks go again, first; once the view moved (or
  // the backup was failed) the dispatcher decides anew.
  void Retry(Stream* stream, std::vector<Forward>& batch, ReplicateRequest& req,
             const absl::Status& s) ABSL_LOCKS_EXCLUDED(mu_);
  // `backup` refused a forward of `job` as fenced (kReplicaFencedCode):
  // closes the job here with UNAVAILABLE (logged once), as hearing the
  // view that failed this shard would.
  void Fenced(Job& job, uint32_t backup, const absl::Status& s);
  // The deadline of the next forward to `backup`.
  absl::Duration DeadlineFor(uint32_t backup) const ABSL_LOCKS_EXCLUDED(mu_);
  // Notes how a forward to `backup`, sent with `deadline`, ended.
  void Record(uint32_t backup, const absl::Status& s, absl::Duration deadline)
      ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  const std::shared_ptr<const ReplicaView> view_;

  mutable absl::Mutex mu_;
  ReplicaSender sender_ ABSL_GUARDED_BY(mu_);
  std::deque<std::shared_ptr<Job>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  // How forwards to each backup have gone.
  BackupHealth health_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, std::unique_ptr<Stream>> streams_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace internal
}  // namespace ps

#endif  // SERVER_INTERNAL_REPLICATOR_H_
