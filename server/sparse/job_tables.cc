#include "server/sparse/job_tables.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/defaults.h"
#include "common/status_macros.h"
#include "server/sparse/internal/table_stats.h"
#include "server/sparse/internal/tables_stream.h"

namespace ps {

using sparse_internal::Answer;
using sparse_internal::NewWaiter;
using sparse_internal::StepBarrier;
using sparse_internal::TablePushes;
using sparse_internal::TableSet;
using sparse_internal::TakePush;
using sparse_internal::WaiterPtr;

namespace {

ConsistencyMode ModeOf(const JobSpec& spec) {
  return spec.consistency().mode() == CONSISTENCY_UNSPECIFIED
             ? BSP
             : spec.consistency().mode();
}

}  // namespace

JobTables::JobTables(const JobSpec& spec, Placement where,
                     std::unique_ptr<TableSet> tables)
    : job_id_(spec.name()),
      where_(where),
      mode_(ModeOf(spec)),
      staleness_(spec.consistency().staleness()),
      step_deadline_(
          absl::Milliseconds(spec.consistency().step_deadline_ms() > 0
                                 ? spec.consistency().step_deadline_ms()
                                 : kDefaultStepDeadlineMs)),
      created_(absl::Now()),
      tables_(std::move(tables)),
      checks_(spec.name(), where, tables_.get()),
      linear_lr_workers_(spec.lr_rule() == LR_RULE_LINEAR
                             ? std::max(1u, spec.num_workers())
                             : 0),
      barrier_(mode_, where.num_workers, spec.consistency().backup_workers()),
      parts_(where.split_buffer_bytes) {}

JobTables::~JobTables() { Close(absl::UnavailableError("shutting down")); }

absl::StatusOr<std::unique_ptr<JobTables>> JobTables::Create(
    const JobSpec& spec, Placement where) {
  if (where.num_workers == 0 || where.num_shards == 0 ||
      where.shard_id >= where.num_shards) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "sparse tables: bad placement (shard %d of %d, %d workers)",
        where.shard_id, where.num_shards, where.num_workers));
  }
  std::vector<bool> named(where.num_shards, false);
  for (size_t i = 0; i < where.owners.size(); ++i) {
    if (where.owners[i] >= where.num_shards || named[where.owners[i]]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "placement.table_shards[%d]: %d is %s (the cluster has %d shards)", i,
          where.owners[i],
          where.owners[i] >= where.num_shards ? "past the cluster"
                                              : "named twice",
          where.num_shards));
    }
    named[where.owners[i]] = true;
  }
  PS_ASSIGN_OR_RETURN(std::unique_ptr<TableSet> tables, TableSet::Create(spec));
  return std::unique_ptr<JobTables>(
      new JobTables(spec, where, std::move(tables)));
}

absl::Status JobTables::NotActive(uint32_t worker) const {
  return absl::FailedPreconditionError(absl::StrFormat(
      "worker %d is not an active member of job %s", worker, job_id_));
}

absl::Status JobTables::AheadError(uint64_t step, uint64_t version) const {
  return absl::InvalidArgumentError(
      absl::StrFormat("step: %d is ahead of the sparse tables' step %d on "
                      "shard %d%s",
                      step, version, where_.shard_id, barrier_.RestoredNote()));
}

void JobTables::AddWaitLocked(const WaiterPtr& w) {
  w->need_copies = barrier_.version();
  waits_.Add(w);
}

void JobTables::CollectReadyLocked(std::vector<WaiterPtr>* ready) {
  const uint64_t limit = std::min(gated_ ? durable_ : UINT64_MAX,
                                  replica_gated_ ? replicated_ : UINT64_MAX);
  waits_.CollectReady(barrier_, limit, ready);
}

void JobTables::GateAnswers() {
  absl::MutexLock l(&mu_);
  gated_ = true;
}

void JobTables::SetDurableVersion(uint64_t version) {
  std::vector<WaiterPtr> ready;
  {
    absl::MutexLock l(&mu_);
    if (version <= durable_) return;
    durable_ = version;
    CollectReadyLocked(&ready);
  }
  for (auto& w : ready) Answer(*tables_, *w);
}

absl::Status JobTables::MaybeCompleteStepLocked() {
  std::vector<const TablePushes*> order;
  if (!barrier_.StepReady(&order)) return absl::OkStatus();
  // The mean of the pushes, or under LR_RULE_LINEAR their sum over the
  // submitted worker count (lr x arrived / num_workers times the mean), as
  // for dense chunks (server/internal/consistency.cc).
  const size_t divisor =
      linear_lr_workers_ != 0 ? linear_lr_workers_ : order.size();
  const float scale = 1.0f / static_cast<float>(divisor);
  const absl::Status s = tables_->Apply(order, scale, barrier_.version());
  if (s.ok() && step_sink_) {
    ReplicaTableStep forward = ForwardOf(order, scale);
    forward.set_version_before(barrier_.version());
    step_sink_(std::move(forward));
  }
  // Either way the step's pushes are done with: applied, or dropped when
  // the step cannot complete (the tables are as before it).
  barrier_.EndStep(s.ok());
  if (!s.ok()) return s;
  tables_->EvictExpired(barrier_.version());
  return absl::OkStatus();
}

absl::Status JobTables::PushBspLocked(const SparseRequestIn& req,
                                      TablePushes pushed,
                                      SparseReplyOut* resp) {
  const uint32_t w = req.worker;
  if (!barrier_.active(w)) return NotActive(w);
  const uint64_t version = barrier_.version();
  if (req.step < version) {
    resp->stale = true;
    return absl::OkStatus();
  }
  if (req.step > version) return AheadError(req.step, version);
  if (barrier_.HasPushed(w)) {
    resp->duplicate = true;
    return absl::OkStatus();
  }
  barrier_.Buffer(w, std::move(pushed));
  return MaybeCompleteStepLocked();
}

absl::Status JobTables::PushUnordered(const SparseRequestIn& req,
                                      TablePushes pushed, SparseReplyOut* resp,
                                      const WaiterPtr& waiter,
                                      std::vector<WaiterPtr>* ready) {
  const uint32_t w = req.worker;
  absl::ReaderMutexLock applying(&apply_mu_);
  // Replicated: from the claim to the count, so that a retry of a push
  // being applied is answered (as a duplicate) only once it was counted,
  // and then waits for the copies to hold it.
  absl::MutexLockMaybe in_order(ordered_.load() ? &order_mu_ : nullptr);
  uint64_t claimed_before = 0;
  float scale = 1.0f;
  {
    absl::MutexLock l(&mu_);
    PS_RETURN_IF_ERROR(closed_);
    if (!barrier_.active(w)) return NotActive(w);
    if (!barrier_.Claim(w, req.step, &claimed_before)) {
      resp->duplicate = true;
      AddWaitLocked(waiter);
      CollectReadyLocked(ready);
      return absl::OkStatus();
    }
    scale = AspScaleLocked();
  }
  return ApplyClaimed(w, req.step, claimed_before, scale, std::move(pushed),
                      {waiter}, ready);
}

float JobTables::AspScaleLocked() const {
  if (linear_lr_workers_ == 0) return 1.0f;
  return static_cast<float>(std::max(barrier_.active_count(), 1u)) /
         static_cast<float>(linear_lr_workers_);
}

absl::Status JobTables::ApplyClaimed(uint32_t w, uint64_t step,
                                     uint64_t claimed_before, float scale,
                                     TablePushes pushed,
                                     const std::vector<WaiterPtr>& waiters,
                                     std::vector<WaiterPtr>* ready) {
  // Replicated (order_mu_ held): the apply, the count (the version it
  // takes) and the eviction of one push before the next's (the copies'
  // order).
  const bool ordered = ordered_.load();
  const absl::Status applied = tables_->Apply({&pushed}, scale, step);
  // Encoded before mu_ is taken.
  ReplicaTableStep forward;
  if (ordered && applied.ok()) {
    forward = ForwardOf({&pushed}, scale);
    forward.set_worker(w);
    forward.set_step(step);
  }
  uint64_t evict_at = 0;
  {
    absl::MutexLock l(&mu_);
    if (!applied.ok()) {
      barrier_.Unclaim(w, step, claimed_before);
      return applied;
    }
    const uint64_t version_before = barrier_.version();
    evict_at = barrier_.CountApplied(w, step);
    if (ordered && step_sink_) {
      forward.set_version_before(version_before);
      forward.set_evict_at(evict_at);
      step_sink_(std::move(forward));
    }
    for (const WaiterPtr& waiter : waiters) AddWaitLocked(waiter);
    CollectReadyLocked(ready);
  }
  // Once per advance of the slowest clock, not per push.
  if (evict_at > 0) tables_->EvictExpired(evict_at);
  return absl::OkStatus();
}

void JobTables::Exchange(const SparseExchangeRequest& req,
                         SparseExchangeResponse* resp,
                         std::function<void(absl::Status)> done) {
  struct Call {
    SparseRequestIn in;
    SparseReplyOut out;
  };
  auto call = std::make_shared<Call>();
  call->in = SparseRequestFromProto(req);
  Exchange(&call->in, &call->out,
           [call, resp, done = std::move(done)](absl::Status s) {
             if (s.ok()) SparseReplyToProto(call->in, call->out, resp);
             done(std::move(s));
           });
}

void JobTables::Exchange(SparseRequestIn* req_in, SparseReplyOut* resp,
                         std::function<void(absl::Status)> done) {
  const SparseRequestIn& req = *req_in;
  absl::Status valid = checks_.Check(req);
  if (!valid.ok()) {
    done(valid);
    return;
  }
  TablePushes pushed = TakePush(*tables_, req_in);
  WaiterPtr waiter = NewWaiter(req, resp, std::move(done), staleness_,
                               absl::Now() + step_deadline_);
  if (req.push && req.parts > 1) {
    ExchangePart(req, std::move(pushed), waiter);
    return;
  }
  std::vector<WaiterPtr> ready, failed_waits;
  absl::Status failed;
  if (req.push && mode_ != BSP) {
    failed = PushUnordered(req, std::move(pushed), resp, waiter, &ready);
    if (!failed.ok()) {
      waiter->done(failed);
      return;
    }
    for (auto& w : ready) Answer(*tables_, *w);
    return;
  }
  {
    absl::MutexLock l(&mu_);
    if (!closed_.ok()) {
      failed = closed_;
    } else if (req.push && !(failed = PausedLocked(req.step)).ok()) {
      // Refused whole, before anything is buffered: no other wait fails.
    } else {
      if (req.push) failed = PushBspLocked(req, std::move(pushed), resp);
      if (failed.ok()) {
        AddWaitLocked(waiter);
        CollectReadyLocked(&ready);
      } else if (mode_ == BSP) {
        // A step that failed to apply: its other pushes wait for a version
        // that will not come.
        waits_.TakeBeyond(barrier_.version(), &failed_waits);
      }
    }
  }
  for (auto& w : failed_waits) w->done(failed);
  if (!failed.ok()) {
    waiter->done(failed);
    return;
  }
  for (auto& w : ready) Answer(*tables_, *w);
}

void JobTables::SetMembership(const std::vector<uint8_t>& active) {
  std::vector<WaiterPtr> ready, failed_waits;
  absl::Status failed;
  {
    absl::MutexLock l(&mu_);
    barrier_.SetActive(active);
    if (mode_ == BSP) failed = MaybeCompleteStepLocked();
    if (!failed.ok()) waits_.TakeBeyond(barrier_.version(), &failed_waits);
    CollectReadyLocked(&ready);
  }
  for (auto& w : failed_waits) w->done(failed);
  for (auto& w : ready) Answer(*tables_, *w);
}

void JobTables::CheckDeadlines(absl::Time now) {
  std::vector<WaiterPtr> late;
  std::vector<sparse_internal::StepParts::Expired> incomplete;
  std::string missing;
  std::string durable;
  uint64_t version = 0;
  {
    absl::MutexLock l(&mu_);
    waits_.TakeLate(now, &late);
    parts_.TakeLate(now, &incomplete);
    if (late.empty() && incomplete.empty()) return;
    missing = absl::StrJoin(barrier_.MissingWorkers(), ", ");
    version = barrier_.version();
    if (gated_) durable = absl::StrFormat(", durable at %d", durable_);
  }
  for (auto& w : late) {
    w->done(absl::DeadlineExceededError(absl::StrFormat(
        "job %s sparse tables on shard %d, step %d: no answer within %s "
        "(tables at version %d%s; waiting for workers [%s])",
        job_id_, where_.shard_id, w->step, absl::FormatDuration(step_deadline_),
        version, durable, missing)));
  }
  for (auto& set : incomplete) FailIncomplete(set);
}

void JobTables::FailIncomplete(const sparse_internal::StepParts::Expired& set) {
  const absl::Status late = absl::DeadlineExceededError(absl::StrFormat(
      "job %s sparse tables on shard %d, step %d: worker %d's push was "
      "split in %d parts and part%s [%s] did not come within %s (its other "
      "parts are dropped, the tables unchanged)",
      job_id_, where_.shard_id, set.step, set.worker, set.parts,
      set.missing.size() == 1 ? "" : "s", absl::StrJoin(set.missing, ", "),
      absl::FormatDuration(step_deadline_)));
  for (const WaiterPtr& w : set.waiters) w->done(late);
}

void JobTables::Close(const absl::Status& why) {
  std::vector<WaiterPtr> waiters;
  {
    absl::MutexLock l(&mu_);
    if (closed_.ok()) closed_ = why;
    waiters = waits_.TakeAll();
    for (WaiterPtr& w : parts_.TakeAll()) waiters.push_back(std::move(w));
  }
  for (auto& w : waiters) w->done(why);
}

uint64_t JobTables::bytes_used() const {
  const uint64_t bytes = tables_->bytes_used();
  absl::MutexLock l(&mu_);
  return bytes + barrier_.pending_bytes() + parts_.bytes();
}

uint64_t JobTables::version() const {
  absl::MutexLock l(&mu_);
  return barrier_.version();
}

void JobTables::FillStats(JobStats* out) const {
  sparse_internal::FillTableStats(*tables_, created_, absl::Now(), out);
  out->set_tables_version(version());
}

absl::Status JobTables::SaveTable(const std::string& name,
                                  ByteSink& sink) const {
  const sparse_internal::Table* t = tables_->Find(name);
  if (t == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "table: job \"", job_id_, "\" has no sparse table \"", name, "\""));
  }
  return t->rows->Save(sink);
}

struct JobTables::Snapshot::Data {
  const JobTables* owner = nullptr;
  StepBarrier::State state;  // the buffered pushes copied
  std::vector<SparseTable::Snapshot> tables;
  bool increment = false;  // some table writes an increment
};

JobTables::Snapshot::Snapshot(std::unique_ptr<Data> data)
    : data_(std::move(data)) {}
JobTables::Snapshot::Snapshot(Snapshot&&) noexcept = default;
JobTables::Snapshot& JobTables::Snapshot::operator=(Snapshot&&) noexcept =
    default;
JobTables::Snapshot::~Snapshot() = default;

uint64_t JobTables::Snapshot::version() const { return data_->state.version; }
bool JobTables::Snapshot::incremental() const { return data_->increment; }

JobTables::Snapshot JobTables::TakeSnapshot(bool incremental) const {
  auto d = std::make_unique<Snapshot::Data>();
  d->owner = this;
  absl::WriterMutexLock no_applies(&apply_mu_);
  absl::MutexLock l(&mu_);
  d->state = barrier_.CopyState();
  // Under mu_ no apply runs (pulls may): every table is at the version.
  // The tables are frozen copy on write: nothing is copied here.
  d->tables = tables_->TakeSnapshots(incremental);
  for (const SparseTable::Snapshot& t : d->tables) {
    d->increment = d->increment || t.incremental();
  }
  return Snapshot(std::move(d));
}

absl::Status JobTables::Snapshot::WriteTo(ByteSink& sink) && {
  Data& d = *data_;
  const JobTables& owner = *d.owner;
  PS_RETURN_IF_ERROR(sparse_internal::WriteBarrierState(
      d.state, owner.where_.num_workers, owner.tables_->size(), sink,
      d.increment));
  return owner.tables_->WriteSnapshots(std::move(d.tables), sink);
}

absl::Status JobTables::Save(ByteSink& sink) const {
  return TakeSnapshot().WriteTo(sink);
}

absl::Status JobTables::Restore(ByteSource& source) {
  return Restore(source, {});
}

void JobTables::TrackChanges() { tables_->TrackChanges(); }

absl::Status JobTables::Restore(ByteSource& full,
                                absl::Span<ByteSource* const> increments) {
  PS_ASSIGN_OR_RETURN(
      StepBarrier::State state,
      sparse_internal::ReadBarrierState(full, where_.num_workers, *tables_));
  // Every table into a fresh one first, so an error changes nothing.
  PS_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<SparseTable>> restored,
                      tables_->ReadTables(full));
  for (size_t i = 0; i < increments.size(); ++i) {
    bool increment = false;
    absl::StatusOr<StepBarrier::State> next = sparse_internal::ReadBarrierState(
        *increments[i], where_.num_workers, *tables_, &increment);
    absl::Status st = next.status();
    if (st.ok() && next->version < state.version) {
      st = absl::DataLossError(absl::StrCat("it holds version ", next->version,
                                            ", older than the ", state.version,
                                            " before it"));
    }
    if (st.ok()) st = tables_->ApplyIncrements(restored, *increments[i]);
    if (!st.ok()) {
      return absl::Status(st.code(),
                          absl::StrCat("increment ", i + 1, " of ",
                                       increments.size(), ": ", st.message()));
    }
    state = *std::move(next);
  }
  absl::WriterMutexLock no_applies(&apply_mu_);
  absl::MutexLock l(&mu_);
  tables_->Replace(std::move(restored));
  barrier_.Restore(std::move(state));
  // The checkpoint it came from is durable.
  durable_ = barrier_.version();
  return absl::OkStatus();
}

}  // namespace ps
