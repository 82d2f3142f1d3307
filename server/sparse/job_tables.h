// One job's sparse tables on one shard (JobSpec.tables) and the consistency
// rules for them: what the ParameterServer's SparseExchange call does
// (proto/ps.proto). Transport-free; the Shard owns one per job that has
// tables and forwards the calls.
//
//   PS_ASSIGN_OR_RETURN(std::unique_ptr<JobTables> t,
//                       JobTables::Create(spec, {.shard_id = 0,
//                                                .num_shards = 2,
//                                                .num_workers = 4}));
//   t->Exchange(request, &response, [](absl::Status s) { ... });
//
// Semantics (the dense tensors' rules, per row instead of per chunk):
//   * The tables share one version: the steps (BSP) or pushes (ASP/SSP)
//     applied on this shard.
//   * BSP: worker w's step-t push is buffered while the version is t; once
//     the quorum (every active worker, or all but backup_workers) pushed,
//     each table receives the pushes concatenated in rank order, so a row
//     pushed by several workers is summed in rank order (bitwise
//     reproducible), divided by the number of pushes and applied once; the
//     version becomes t + 1 and TTL eviction runs. A second push of (w, t)
//     is a duplicate, a push for t < version is stale (both answered as
//     usual, not applied), t > version is INVALID_ARGUMENT. The pull part
//     answers once the version is >= t + 1 (>= t without a push).
//   * ASP: a push is applied on arrival, undivided; a (w, t) at or below the
//     worker's last pushed step is a duplicate. SSP(s): as ASP, and the pull
//     part of step t waits until (t + 1) - (slowest active worker's pushed
//     steps) <= s (t - slowest <= s without a push).
//   * A split step (SparseExchangeRequest.part/parts: its rows for this
//     shard did not fit one message) is put back together first
//     (internal/step_parts.h): each part's rows are buffered, its pull
//     waiting with them, until every part of the (worker, step) is in; then
//     the parts' rows, concatenated in part order, are the step's one push
//     under the rules above (BSP: it joins the step's aggregate; ASP/SSP:
//     it is applied once, when the last part is in), and each part's pull
//     is answered with its own rows at the version its mode needs. A part
//     held again is a duplicate; a part of a push already applied or
//     buffered is a duplicate (or stale) as a whole push's retry is. A part
//     count that differs between parts, a held part sent again with other
//     rows, or parts beyond TablesPlacement.split_buffer_bytes fail the
//     call and drop the step's held parts; a step whose parts are not all
//     in by its first part's deadline fails naming the missing ones.
//   * Admission counts a row once per apply that touches it (BSP: once per
//     step however many workers pushed it). TTL (evict_after_steps T):
//     rows not pushed for T steps (BSP: versions; ASP/SSP: the slowest
//     worker's steps) are dropped within T / 16 more steps.
//   * Bad input (unknown table, a table named twice, ids not a whole number
//     of uint64, wrong number of values, an id of another shard or beyond
//     num_ids, NaN or inf, worker out of range or inactive, ...) fails the
//     call naming the field before anything changes. A push over a table's
//     memory budget without evict_lru fails RESOURCE_EXHAUSTED naming the
//     table; the tables and the step's other pushes are unchanged.
//
// Thread safety: every method may be called concurrently. One mutex orders
// the pushes, the version and the waits (the StepBarrier and the WaitList).
// A BSP step is applied under it (nothing else pushes until it is
// answered); ASP/SSP pushes are applied outside it, concurrently, under the
// tables' own stripe locks, except in a replicated job, where they apply
// one at a time (SetStepSink). `done` never runs under it.
//
// The rooms (server/sparse/internal/): table_set (the tables and applying
// to them), request_checks (validation and decoding), step_barrier (BSP
// quorum, ASP/SSP clocks), waiters (pending exchanges and their answers),
// tables_stream (the save stream), table_stats. This class joins them
// under its locks.
#ifndef SERVER_SPARSE_JOB_TABLES_H_
#define SERVER_SPARSE_JOB_TABLES_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/job.pb.h"
#include "proto/ps.pb.h"
#include "server/sparse/byte_stream.h"
#include "server/sparse/internal/request_checks.h"
#include "server/sparse/internal/step_barrier.h"
#include "server/sparse/internal/step_parts.h"
#include "server/sparse/internal/table_set.h"
#include "server/sparse/internal/waiters.h"
#include "server/sparse/sparse_request.h"

namespace ps {

class JobTables {
 public:
  // shard_id of num_shards, num_workers.
  using Placement = sparse_internal::TablesPlacement;

  // The tables of `spec` (defaults applied, core/table_spec.h) for this
  // shard. INVALID_ARGUMENT naming the field for a bad table spec.
  static absl::StatusOr<std::unique_ptr<JobTables>> Create(const JobSpec& spec,
                                                           Placement where);
  ~JobTables();

  // A worker's sparse step (see the file comment). Never blocks: calls
  // `done` exactly once, on this thread or later on the one that completes
  // the wait (an Exchange, SetMembership, CheckDeadlines or Close). `req`
  // and `resp` must stay valid until then; the pushed rows are moved out of
  // req->gradients once checked.
  void Exchange(SparseRequestIn* req, SparseReplyOut* resp,
                std::function<void(absl::Status)> done);
  // The same over protobuf messages (tests, in-process callers): converts
  // both ways; `resp` is written before `done` runs.
  void Exchange(const SparseExchangeRequest& req, SparseExchangeResponse* resp,
                std::function<void(absl::Status)> done);

  // The ranks that count toward the BSP quorum and SSP's slowest worker.
  // May complete a BSP step and waits.
  void SetMembership(const std::vector<uint8_t>& active);

  // Fails waits older than the job's step_deadline_ms, naming the workers
  // the step misses.
  void CheckDeadlines(absl::Time now);

  // BSP with a checkpoint every step (core/checkpoint_gate.h): from now on
  // an answer carrying version v (the push of step v - 1, a pull of step v)
  // waits until SetDurableVersion(>= v), so no worker holds a table version
  // that a crash can lose. Call before the first Exchange.
  void GateAnswers();
  // The tables' version in the newest durable checkpoint (or one whose
  // write failed: training goes on without it); releases the answers it
  // covers. Lower versions than the last one are ignored. Restore sets it
  // to the restored version.
  void SetDurableVersion(uint64_t version);

  // Replicated jobs (JobSpec.replication > 1; the copies and their
  // forwards are server/internal/table_replicas.h). From now on each BSP
  // step, or ASP/SSP push, applied by an Exchange is handed to `sink`
  // (under the mutex: it must not block nor call back) as the
  // ReplicaTableStep a backup applies with ApplyForwardedStep to the same
  // bits. ASP/SSP pushes then apply one at a time (with their TTL
  // eviction), each taking the next version, so that the copies, applying
  // them in version order, apply them in the primary's order; a push
  // carries its (worker, step), so the copies count it as a duplicate
  // after a failover too. Call before the first Exchange.
  using StepSink = std::function<void(ReplicaTableStep step)>;
  void SetStepSink(StepSink sink);
  // From now on an answer carrying version v also waits until
  // SetReplicatedVersion(>= v) (as GateAnswers does for checkpoints);
  // ASP/SSP: an answer waits for the version the tables had when its push
  // was applied, or (a duplicate, a pull) when it came.
  void GateOnReplicas();
  // The version every copy that answers wait for holds (UINT64_MAX: none
  // to wait for). Unlike SetDurableVersion it may go down again (a backup
  // joined); answers already released stay released.
  void SetReplicatedVersion(uint64_t version);
  // Backup side: applies a forwarded step (ReplicaTableStep) as the
  // primary's Exchange applied it: same pushes, scale and step, so the
  // same rows, optimizer state and evictions. A step at or below the
  // version held changes nothing (a retry); one past it is OUT_OF_RANGE
  // (this copy lacks its base: the primary sends the state). ASP/SSP: the
  // push's (worker, step) is counted (claimed, the worker's clock) and the
  // eviction it carries runs. Bad input (an unknown table, ids not whole
  // uint64s, a wrong number of values, an id of another shard, a bad
  // value, a worker out of range) is INVALID_ARGUMENT naming the field,
  // nothing changed.
  absl::Status ApplyForwardedStep(const ReplicaTableStep& step);
  // The shard whose rows these tables hold.
  uint32_t shard_id() const { return where_.shard_id; }

  // Fails every pending wait and every later call with `why` (DropJob,
  // Shutdown).
  void Close(const absl::Status& why);

  // Live re-placement of the rows (BSP; server/internal/reshard_tables.h,
  // job_tables_move.cc). Pause: from now on a push of a step >= `step` is
  // refused UNAVAILABLE, marked PausedForReplacement (the worker retries;
  // after the COMMIT the shard refuses its placement epoch); pulls go on.
  // True when quiesced: the version is `step` and no push of it is held.
  // FAILED_PRECONDITION naming pause_step (nothing changed) when the
  // version is past `step` or a push of it is buffered. Again: moves the
  // pause.
  absl::StatusOr<bool> Pause(uint64_t step);
  void Unpause();
  bool Quiesced(uint64_t step) const;
  // The rows (and admission counters) whose id `keep` accepts, with the
  // tables' version, as one stream for InstallRows: format 2 of
  // tables_stream.h, each table's part a SparseTable increment. Only while
  // paused and quiesced (else FAILED_PRECONDITION): nothing is buffered,
  // and no push changes the rows meanwhile.
  absl::Status SaveRowsWhere(const SparseTable::IdFilter& keep,
                             ByteSink& sink) const;
  // Fresh tables (nothing exchanged yet) take the rows of `streams`
  // (SaveRowsWhere's, one per shard they come from) and the version they
  // carry, which must be the same in each. Every id must be this shard's
  // under its placement: INVALID_ARGUMENT naming the stream and the id;
  // DATA_LOSS for a corrupt stream. Everything is read into new tables
  // first, so an error changes nothing.
  absl::Status InstallRows(absl::Span<ByteSource* const> streams);
  // The shard that owns row `id` under these tables' placement, and
  // whether this shard owns any (it is among Placement.table_shards).
  uint32_t OwnerOf(uint64_t id) const;
  bool OwnsRows() const;

  // Bytes of every table (rows, state, index, admission counters), of the
  // buffered BSP pushes and of the parts of split steps held.
  uint64_t bytes_used() const;
  uint64_t version() const;
  // TableStats per table, and tables_version.
  void FillStats(JobStats* out) const;

  // Writes table `name`'s SparseTable::Save stream (rows, optimizer state,
  // admission counters) to `sink`, for an export of its rows
  // (server/sparse/table_rows.h). One stripe is copied at a time, so a
  // running job's table is not read at one instant (each row is whole);
  // the extra memory is one stripe's copy. NOT_FOUND naming the table.
  absl::Status SaveTable(const std::string& name, ByteSink& sink) const;

  // The version, the consistency state (buffered BSP pushes, ASP/SSP
  // pushed steps) and every table, restored exactly by Restore (which
  // replaces everything, or changes nothing on an error). Save() =
  // TakeSnapshot() then WriteTo(): with TrackChanges it starts a new
  // interval of changes like any snapshot, so only the checkpointer
  // should call it then.
  absl::Status Save(ByteSink& sink) const;
  // No other call may be in progress (the shard restores before serving).
  // After it, a BSP push of a step beyond the restored version fails
  // INVALID_ARGUMENT saying that the tables were restored (the updates
  // after the checkpoint are lost), like any step from the future; with
  // GateAnswers no worker can be there (it saw no version beyond the
  // durable one). An increment's stream is refused (DATA_LOSS).
  absl::Status Restore(ByteSource& source);
  // The same from a full stream and the increments written after it, in
  // order (each on the snapshot just before it): the state as the last
  // one wrote it, exactly. Everything is read into fresh tables first, so
  // an error (naming the increment) changes nothing.
  absl::Status Restore(ByteSource& full,
                       absl::Span<ByteSource* const> increments);

  // Incremental checkpoints: from now on every table tracks the rows it
  // changes (SparseTable::TrackChanges: a bit per row update), so that
  // TakeSnapshot(true) may write only what changed since the previous
  // TakeSnapshot. Call before the first Exchange.
  void TrackChanges();

  // The state Save writes, captured at one instant: under the mutex (so
  // no apply runs; exchanges wait meanwhile) the consistency state is
  // copied (the buffered BSP pushes) and each table's stripes are frozen
  // copy on write (SparseTable::TakeSnapshot: no row is copied then).
  // That is the whole pause a checkpoint causes. Until the Snapshot is
  // written or destroyed, each row an apply, a new row or an eviction
  // changes is copied once, so its extra memory is the rows changed
  // meanwhile. WriteTo encodes and writes it with no JobTables lock held
  // (a batch of rows at a time under a stripe's reader lock), so exchanges
  // and applies go on during the encoding and the I/O. Thread-compatible;
  // it must not outlive this JobTables, and Restore must not run while it
  // is held.
  class Snapshot {
   public:
    Snapshot(Snapshot&&) noexcept;
    Snapshot& operator=(Snapshot&&) noexcept;
    ~Snapshot();
    // The tables' version at the instant it was taken.
    uint64_t version() const;
    // Whether it writes an increment on the previous snapshot (Restore
    // needs that one's stream, and those before it down to a full one).
    bool incremental() const;
    // Writes the Save() stream; call once.
    absl::Status WriteTo(ByteSink& sink) &&;

   private:
    friend class JobTables;
    struct Data;
    explicit Snapshot(std::unique_ptr<Data> data);
    std::unique_ptr<Data> data_;
  };
  // `incremental`: an increment where the tables track their changes
  // and the previous snapshot is known (else a full one).
  Snapshot TakeSnapshot(bool incremental = false) const;

 private:
  JobTables(const JobSpec& spec, Placement where,
            std::unique_ptr<sparse_internal::TableSet> tables);

  absl::Status NotActive(uint32_t worker) const;
  // BSP: a push of a step beyond the tables' version.
  absl::Status AheadError(uint64_t step, uint64_t version) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A push of `step` that the pause refuses (else OK).
  absl::Status PausedLocked(uint64_t step) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // BSP, under mu_: buffers the push, applies the step once complete; sets
  // resp->duplicate / stale.
  absl::Status PushBspLocked(const SparseRequestIn& req,
                             sparse_internal::TablePushes pushed,
                             SparseReplyOut* resp)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ASP/SSP: the push is claimed under mu_ (duplicates), applied with no
  // JobTables lock (the tables lock their stripes), then counted under mu_.
  // Fills `ready` with the waits it completes, the caller's own included.
  absl::Status PushUnordered(const SparseRequestIn& req,
                             sparse_internal::TablePushes pushed,
                             SparseReplyOut* resp,
                             const sparse_internal::WaiterPtr& waiter,
                             std::vector<sparse_internal::WaiterPtr>* ready);
  // ASP/SSP: the scale of a push. LR_RULE_NONE: 1; LR_RULE_LINEAR: active
  // ranks / the submitted num_workers, as for dense chunks.
  float AspScaleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ASP/SSP, holding apply_mu_ shared (and order_mu_ when ordered_, from
  // before the claim): applies w's claimed step scaled by `scale` (no
  // JobTables lock held), then counts it (and forwards it when ordered_)
  // and adds `waiters` to the waits (or unclaims it on an error).
  absl::Status ApplyClaimed(
      uint32_t w, uint64_t step, uint64_t claimed_before, float scale,
      sparse_internal::TablePushes pushed,
      const std::vector<sparse_internal::WaiterPtr>& waiters,
      std::vector<sparse_internal::WaiterPtr>* ready);
  // A checked part of a split push (its rows taken out, its wait made):
  // held until the step's last part is in, then pushed once. Answers or
  // fails `waiter` (and the waits it completes or drops).
  void ExchangePart(const SparseRequestIn& req,
                    sparse_internal::TablePushes pushed,
                    const sparse_internal::WaiterPtr& waiter);
  // ExchangePart's BSP and ASP/SSP halves. `failed` gets the other waits
  // that fail with the returned error; `ready` those to answer.
  absl::Status PushPartBspLocked(
      sparse_internal::SplitPart part,
      std::vector<sparse_internal::WaiterPtr>* ready,
      std::vector<sparse_internal::WaiterPtr>* failed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PushPartUnordered(
      sparse_internal::SplitPart part,
      std::vector<sparse_internal::WaiterPtr>* ready,
      std::vector<sparse_internal::WaiterPtr>* failed);
  // BSP: applies the step once its quorum pushed. An error (a table's
  // budget) drops the step's pushes and leaves the version.
  absl::Status MaybeCompleteStepLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CollectReadyLocked(std::vector<sparse_internal::WaiterPtr>* ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ApplyForwardedStep's checks: `step`'s rows as one push, or an error.
  absl::StatusOr<sparse_internal::TablePushes> ForwardedPushes(
      const ReplicaTableStep& step) const;
  // The forward of the pushes `order` applied with `scale` (their rows
  // concatenated in that order; version_before left to the caller).
  ReplicaTableStep ForwardOf(
      const std::vector<const sparse_internal::TablePushes*>& order,
      float scale) const;
  // Adds `w` to the waits, needing the copies to hold the version now
  // (GateOnReplicas, ASP/SSP).
  void AddWaitLocked(const sparse_internal::WaiterPtr& w)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the waits of a split step whose parts did not all come in time,
  // naming the missing ones. Not under mu_.
  void FailIncomplete(const sparse_internal::StepParts::Expired& set);

  const std::string job_id_;
  const Placement where_;
  const ConsistencyMode mode_;
  const uint32_t staleness_;
  const absl::Duration step_deadline_;
  const absl::Time created_;
  // Its tables are fixed at Create; Restore swaps their rows.
  const std::unique_ptr<sparse_internal::TableSet> tables_;
  const sparse_internal::RequestChecks checks_;
  // LR_RULE_LINEAR: the submitted num_workers the rate is scaled against
  // (0: LR_RULE_NONE).
  const uint32_t linear_lr_workers_;

  // ASP/SSP applies run holding it shared; snapshots and Restore hold it
  // exclusively, so they never see a push half applied. Before mu_.
  mutable absl::Mutex apply_mu_;
  // A replicated ASP/SSP job's pushes (ordered_: a step sink is set) are
  // claimed, applied, counted and evicted under it: one at a time, in
  // version order.
  absl::Mutex order_mu_ ABSL_ACQUIRED_AFTER(apply_mu_);
  std::atomic<bool> ordered_{false};
  mutable absl::Mutex mu_ ABSL_ACQUIRED_AFTER(apply_mu_, order_mu_);
  sparse_internal::StepBarrier barrier_ ABSL_GUARDED_BY(mu_);
  sparse_internal::WaitList waits_ ABSL_GUARDED_BY(mu_);
  // The parts of split pushes not yet complete.
  sparse_internal::StepParts parts_ ABSL_GUARDED_BY(mu_);
  absl::Status closed_ ABSL_GUARDED_BY(mu_);
  // GateAnswers: BSP answers wait for durable_ to reach their version.
  bool gated_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t durable_ ABSL_GUARDED_BY(mu_) = 0;
  // GateOnReplicas: answers also wait for replicated_.
  bool replica_gated_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t replicated_ ABSL_GUARDED_BY(mu_) = 0;
  StepSink step_sink_ ABSL_GUARDED_BY(mu_);
  // Pause: pushes of steps >= it are refused (UINT64_MAX: none).
  uint64_t pause_step_ ABSL_GUARDED_BY(mu_) = UINT64_MAX;
};

}  // namespace ps

#endif  // SERVER_SPARSE_JOB_TABLES_H_
