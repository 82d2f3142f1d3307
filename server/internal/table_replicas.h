// The copies of a replicated job's sparse tables on one shard
// (JobSpec.replication > 1, any consistency mode; docs/OPERATIONS.md
// "Replication"). Rows are placed by ShardForId over the job's shards; the
// rows of shard s have k - 1 backups on the same ring as s's dense chunks
// (the backups of s's first chunk, else the next k - 1 shards), so one
// failover moves a shard's chunks and rows to the same successor. Each shard
// holds its own rows (the Job's `tables`, borrowed) and a copy of the rows of
// each shard whose ring names it (owned here).
//
//   auto replicas = TableReplicas::Create(options, placement, k, view,
//                                         job.tables.get(), make_tables);
//   replicas->SetSender(send);           // the shards' Replicate RPC
//   PS_ASSIGN_OR_RETURN(JobTables* t, replicas->Serving(req.table_shard));
//   t->Exchange(...);                    // answers wait for the backups
//
// Replication after aggregation: each update a copy's acting primary
// applies (JobTables::SetStepSink: a BSP step, its pushes in rank order; an
// ASP/SSP push, which a replicated job's tables apply one at a time, each
// taking the next version, with its (worker, step) and the eviction that
// followed it) is logged and forwarded, in version order, to every live or
// joining backup as the update itself (ReplicaTableStep: the pushes and
// their scale), which the backup applies in that order with the same code
// to the same bits (JobTables::ApplyForwardedStep). A backup whose state is
// unknown (the first forward, a joining copy, one that refused a step's base
// with OUT_OF_RANGE, or one the log no longer covers) first gets the copy's
// whole state (JobTables::TakeSnapshot at one instant, in pieces of at
// most `piece_bytes`; a step over that bound travels the same way), then
// the steps from that version on. The copy's
// answers wait (JobTables::GateOnReplicas) for the version every live
// backup acknowledged, and a joining backup's once it caught up; so after
// a failover the promoted copy holds every answered update. BSP needs no
// (worker, step) dedupe state forwarded (a push that was not answered is
// resent by its worker, one answered is stale there); ASP/SSP forwards
// carry it, so a resend of a push the copy holds is a duplicate there.
//
// Thread safety: every method may be called concurrently. One thread per
// object sends the forwards (started by the first Wake); the destructor
// stops it (a forward in flight ends within its deadline). Lock order:
// a JobTables' mutex, then mu_ (the step sink runs under the former).
#ifndef SERVER_INTERNAL_TABLE_REPLICAS_H_
#define SERVER_INTERNAL_TABLE_REPLICAS_H_

#include <atomic>
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
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/ps.pb.h"
#include "server/internal/backup_health.h"
#include "server/internal/replica_view.h"
#include "server/sparse/job_tables.h"

namespace ps {
namespace internal {

// Sends `req` to the shard at `address`, blocking up to `deadline`
// (Replicator's ReplicaSender).
using TablesSender = std::function<absl::Status(const std::string& address,
                                                const ReplicateRequest& req,
                                                absl::Time deadline)>;

class TableReplicas {
 public:
  struct Options {
    // A step forward's deadline; a state's is `max_deadline`.
    absl::Duration deadline = absl::Seconds(1);
    absl::Duration max_deadline = absl::Seconds(8);
    // Wait before a failed forward is tried again (unless woken first).
    absl::Duration retry = absl::Milliseconds(50);
    // The most bytes of state or steps in one forward (a step over it, and
    // a state, go in pieces).
    size_t piece_bytes = size_t{1} << 20;
    // Steps kept for backups that lack them; one further behind gets the
    // state.
    size_t max_log_steps = 1024;
  };
  // The tables of shard `shard`'s rows, empty (a copy of them).
  using MakeTables =
      std::function<absl::StatusOr<std::unique_ptr<JobTables>>(uint32_t)>;

  // The copies `view->self()` holds of the job `job_id` placed by
  // `placement` with `k` copies: `own` (its own rows, borrowed: it must
  // outlive this object) and one made by `make` for each shard whose ring
  // names this shard. Every copy's answers wait for its backups.
  static absl::StatusOr<std::unique_ptr<TableReplicas>> Create(
      Options options, std::string job_id, const Placement& placement,
      uint32_t k, std::shared_ptr<const ReplicaView> view, JobTables* own,
      const MakeTables& make);
  ~TableReplicas();

  TableReplicas(const TableReplicas&) = delete;
  TableReplicas& operator=(const TableReplicas&) = delete;

  // How forwards travel, and what a backup's fencing refusal does (closes
  // the job here). Call before the first Wake.
  void SetSender(TablesSender sender) ABSL_LOCKS_EXCLUDED(mu_);
  void SetOnFenced(std::function<void(const absl::Status&)> on_fenced)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The object that owns this one (the Job). The forwarding thread holds
  // it through each round, so that an answer the round releases (which
  // holds the job) or the fencing's close never drops its last reference
  // in the middle of the round; dropped between rounds, it destroys this
  // object on that thread, which then touches nothing of it. Call before
  // the first Wake; unset (tests of this class alone): nothing is held.
  void SetOwner(std::weak_ptr<void> owner) ABSL_LOCKS_EXCLUDED(mu_);

  // The copy of shard `shard`'s rows if this shard serves it now:
  // INVALID_ARGUMENT naming table_shard when no copy is held here,
  // UNAVAILABLE when another shard serves it (the worker looks it up).
  absl::StatusOr<JobTables*> Serving(uint32_t shard) const;

  // Backup side of ReplicateRequest.tables (the epochs already checked):
  // FAILED_PRECONDITION unless req.from_shard is the copy's acting primary;
  // a piece of state is kept until the last is in, then restored (nothing
  // changes on an error); steps are applied in order.
  absl::Status Apply(const ReplicateRequest& req) ABSL_LOCKS_EXCLUDED(mu_);

  // The view moved, or there is something to forward: the sender thread
  // looks at every copy (started on first use).
  void Wake() ABSL_LOCKS_EXCLUDED(mu_);
  // `shard` (re)joins empty: what it acknowledged no longer counts.
  void ForgetAcks(uint32_t shard) ABSL_LOCKS_EXCLUDED(mu_);
  // Of the view's joining shards, those a copy served here has not caught
  // up yet (SetReplicaViewResponse.behind).
  std::vector<uint32_t> Behind() const ABSL_LOCKS_EXCLUDED(mu_);
  // The backups not failed whose table forwards have failed without an
  // answer since at least `now - lag`, the last with `max_deadline` or
  // otherwise than by running out of time (SetReplicaViewResponse.lagging;
  // BackupHealth, as Replicator::Lagging).
  std::vector<uint32_t> Lagging(absl::Duration lag, absl::Time now) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Whether every copy held here that another shard serves got a state or
  // a step since this object was made (a joining shard is not caught up
  // before).
  bool AllCopied() const ABSL_LOCKS_EXCLUDED(mu_);

  // Passed on to the copies this object owns (the Job does its own).
  void SetMembership(const std::vector<uint8_t>& active);
  void CheckDeadlines(absl::Time now);
  void Close(const absl::Status& why);

 private:
  // How far one backup of a copy is known to be.
  struct BackupState {
    bool known = false;   // `acked` holds: else it gets the state first
    uint64_t acked = 0;   // the version it holds
    bool synced = false;  // joining: answers wait for it from now on
  };
  struct Copy {
    uint32_t shard = 0;
    ChunkPlacement placement;  // shard and its backups (the ring)
    JobTables* tables = nullptr;
    std::unique_ptr<JobTables> owned;
    // Primary side (guarded by mu_): steps not yet on every backup, in
    // order, and where each backup is.
    std::deque<ReplicaTableStep> log;
    std::map<uint32_t, BackupState> backups;
    // Backup side: the pieces of a state being received (apply_mu).
    absl::Mutex apply_mu;
    std::string pieces ABSL_GUARDED_BY(apply_mu);
    uint64_t pieces_version ABSL_GUARDED_BY(apply_mu) = 0;
    bool copied = false;  // guarded by mu_
  };

  TableReplicas(Options options, std::string job_id,
                std::shared_ptr<const ReplicaView> view);

  Copy* Find(uint32_t shard) const;
  void WakeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  // One pass over the copies served here; false if a forward failed, and
  // then `*fenced` the refusal when a backup refused one as fenced.
  bool Round(absl::Status* fenced) ABSL_LOCKS_EXCLUDED(mu_);
  // Brings `backup` up to the copy's version; the status of the forward
  // that failed.
  absl::Status Update(Copy& c, uint32_t backup) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status SendState(Copy& c, uint32_t backup) ABSL_LOCKS_EXCLUDED(mu_);
  // `bytes` (a state at `version`, or one `step`'s) in pieces.
  absl::Status SendPieces(Copy& c, uint32_t backup, const std::string& bytes,
                          uint64_t version, bool step) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status SendSteps(Copy& c, uint32_t backup, bool* done)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Send(uint32_t backup, ReplicateRequest& req,
                    absl::Duration deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops the steps every known backup holds; releases the answers.
  void AfterRound(Copy& c) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status ApplyState(Copy& c, const ReplicaTables& t);
  absl::Duration DeadlineFor(uint32_t backup) const ABSL_LOCKS_EXCLUDED(mu_);
  // How a forward to `backup` given `used` ended (the lagging report).
  void Record(uint32_t backup, const absl::Status& s, absl::Duration used)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A backup refused a forward as fenced: stops (logged); Loop then closes
  // the job here with the returned status.
  absl::Status Fenced(uint32_t backup, const absl::Status& s)
      ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  const std::string job_id_;
  const std::shared_ptr<const ReplicaView> view_;
  std::vector<std::unique_ptr<Copy>> copies_;

  mutable absl::Mutex mu_;
  absl::CondVar wake_;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  TablesSender sender_ ABSL_GUARDED_BY(mu_);
  std::function<void(const absl::Status&)> on_fenced_ ABSL_GUARDED_BY(mu_);
  uint64_t logged_epoch_ ABSL_GUARDED_BY(mu_) = UINT64_MAX;
  // How forwards to each backup have gone (the deadline: of a step
  // forward; a state's is max_deadline).
  BackupHealth health_ ABSL_GUARDED_BY(mu_);
  std::weak_ptr<void> owner_ ABSL_GUARDED_BY(mu_);
  bool has_owner_ ABSL_GUARDED_BY(mu_) = false;
  // Set by the destructor when it runs on the forwarding thread (the
  // owner's last reference went there): shared with that thread, which
  // then returns at once.
  const std::shared_ptr<std::atomic<bool>> destroyed_ =
      std::make_shared<std::atomic<bool>>(false);
  std::thread thread_;
};

// The ring of shard `shard`'s rows under `placement` with `k` copies: the
// backups of its first chunk, else the next k - 1 shards.
ChunkPlacement TablesCopyPlacement(const Placement& placement, uint32_t shard,
                                   uint32_t k);

}  // namespace internal
}  // namespace ps

#endif  // SERVER_INTERNAL_TABLE_REPLICAS_H_
