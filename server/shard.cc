#include "server/shard.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/trace_recorder.h"
#include "server/internal/checkpointer.h"
#include "server/internal/consistency.h"
#include "server/internal/job.h"
#include "server/internal/job_stats.h"
#include "server/internal/reasons.h"
#include "server/internal/registration.h"
#include "server/internal/replica_view.h"
#include "server/internal/replicator.h"
#include "server/internal/validation.h"
#include "server/internal/waits.h"
#include "server/internal/warm_start.h"
#include "spdlog/spdlog.h"

namespace ps {

using internal::Chunk;
using internal::Job;
using internal::PushCounts;
using internal::WaiterPtr;

Shard::Shard(ShardOptions options)
    : options_(std::move(options)),
      start_time_(absl::Now()),
      incarnation_(static_cast<uint64_t>(absl::ToUnixNanos(start_time_))),
      checkpointer_(
          std::make_unique<internal::Checkpointer>(options_.shard_id)),
      replica_view_(std::make_shared<internal::ReplicaView>(options_.shard_id)),
      replicator_(std::make_unique<internal::Replicator>(
          internal::Replicator::Options{
              .deadline = options_.replicate_deadline,
              .max_deadline = options_.replicate_max_deadline,
              .retry = options_.replicate_retry},
          replica_view_)) {}

Shard::~Shard() { Shutdown(); }

absl::Status Shard::ShuttingDown() const {
  rejected_.Add(internal::kShutdown);
  return absl::UnavailableError(
      absl::StrCat("shard ", options_.shard_id, " is shutting down"));
}

absl::StatusOr<Shard::JobPtr> Shard::FindJob(const std::string& job_id) const {
  absl::ReaderMutexLock l(&mu_);
  if (shutdown_) return ShuttingDown();
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return UnknownJob(job_id);
  return it->second;
}

std::vector<Shard::JobPtr> Shard::AllJobs() const {
  std::vector<JobPtr> jobs;
  absl::ReaderMutexLock l(&mu_);
  for (const auto& [id, job] : jobs_) jobs.push_back(job);
  return jobs;
}

uint32_t Shard::WorkerSlots() const {
  uint32_t slots = 0;
  for (const JobPtr& job : AllJobs()) slots += job->num_workers;
  return slots;
}

// ---------------------------------------------------------------------------
// Registration.

absl::StatusOr<Shard::JobPtr> Shard::NewJob(const RegisterJobRequest& req,
                                            int* local_count) const {
  absl::StatusOr<JobPtr> job = internal::NewJob(
      req, options_.shard_id, checkpointer_->enabled(), local_count);
  if (!job.ok()) {
    rejected_.Add(internal::kBadSpec);
    return job;
  }
  (*job)->view = replica_view_;
  PS_RETURN_IF_ERROR(AttachTableReplicas(*job));
  return job;
}

absl::Status Shard::SameRegistration(const Job& existing, const Job& job,
                                     RegisterJobResponse* resp) const {
  const std::string diff = internal::RegistrationDiff(existing, job);
  if (diff.empty()) {
    resp->set_chunks_held(existing.chunks.size());
    resp->set_bytes_held(existing.bytes);
    return absl::OkStatus();
  }
  rejected_.Add(internal::kSpecMismatch);
  return absl::FailedPreconditionError(
      absl::StrCat("job \"", job.id, "\" is already registered on shard ",
                   options_.shard_id, " with another spec (", diff, ")"));
}

absl::Status Shard::OverBudget(const Job& job, int local_count) const {
  const uint64_t free =
      options_.memory_budget_bytes - bytes_held_ - bytes_reserved_;
  rejected_.Add(internal::kOverBudget);
  return absl::ResourceExhaustedError(absl::StrCat(
      "job \"", job.id, "\" needs ", job.bytes, " bytes on shard ",
      options_.shard_id, " (", local_count,
      " chunks: parameters, their encoded reply, optimizer state",
      job.mode == BSP ? ", one gradient per worker" : "", ") but only ", free,
      " of the ", options_.memory_budget_bytes, "-byte budget are free"));
}

absl::StatusOr<bool> Shard::Reserve(const Job& job, int local_count,
                                    RegisterJobResponse* resp) {
  absl::MutexLock l(&mu_);
  if (shutdown_) return ShuttingDown();
  if (auto it = jobs_.find(job.id); it != jobs_.end()) {
    PS_RETURN_IF_ERROR(SameRegistration(*it->second, job, resp));
    return false;
  }
  if (!FitsBudget(job.bytes)) return OverBudget(job, local_count);
  bytes_reserved_ += job.bytes;
  return true;
}

absl::StatusOr<bool> Shard::Admit(const JobPtr& job, int local_count,
                                  const absl::Status& init_status,
                                  RegisterJobResponse* resp) {
  absl::MutexLock l(&mu_);
  bytes_reserved_ -= job->bytes;
  if (!init_status.ok()) {
    rejected_.Add(internal::kBadSpec);
    return init_status;
  }
  if (shutdown_) return ShuttingDown();
  if (auto it = jobs_.find(job->id); it != jobs_.end()) {
    // A concurrent registration won.
    PS_RETURN_IF_ERROR(SameRegistration(*it->second, *job, resp));
    return false;
  }
  if (!FitsBudget(job->bytes)) return OverBudget(*job, local_count);
  bytes_held_ += job->bytes;
  jobs_[job->id] = job;
  return true;
}

absl::Status Shard::RegisterJob(const RegisterJobRequest& req,
                                RegisterJobResponse* resp) {
  int local_count = 0;
  PS_ASSIGN_OR_RETURN(JobPtr job, NewJob(req, &local_count));
  PS_ASSIGN_OR_RETURN(const bool reserved, Reserve(*job, local_count, resp));
  if (!reserved) return absl::OkStatus();

  // Allocate and initialise without holding the map lock.
  absl::Status init_status = internal::InitChunks(options_.shard_id, *job);
  // A rejoining copy's values come from the live copies, not from init.
  if (init_status.ok() && job->spec.has_init() && !req.joining()) {
    // The source of a from_job warm start: that job's chunks on this shard.
    absl::StatusOr<JobPtr> source = absl::NotFoundError("");
    if (job->spec.init().has_from_job()) {
      source = FindJob(job->spec.init().from_job());
    }
    init_status = internal::ApplyWarmStart(
        *job, source.ok() ? source->get() : nullptr, options_.shard_id);
  }
  if (req.joining()) internal::MarkJoiningCopies(*job);
  internal::InitJobState(*job, std::vector<uint8_t>(job->num_workers, 1));
  const CheckpointSpec& ck = req.spec().checkpoint();
  if ((ck.every_steps() > 0 || ck.every_seconds() > 0) && !job->checkpointing) {
    // The job runs without them; the log and the stats say so.
    spdlog::warn(
        "job {}: spec.checkpoint asks for checkpoints but shard {} has no "
        "checkpoint_dir; running without them",
        job->id, options_.shard_id);
    job->rejected.Set(internal::kNoCheckpointDir, 1);
  }
  if (job->checkpointing) {
    absl::MutexLock l(&job->schedule.mu);
    internal::ScheduleNext(*job, 0, 0, absl::Now());
  }
  PS_ASSIGN_OR_RETURN(const bool admitted,
                      Admit(job, local_count, init_status, resp));
  if (!admitted) return absl::OkStatus();
  registered_.store(true, std::memory_order_relaxed);
  // Warm-started from a job: the primaries forward the initial state to
  // their backups now (answers wait for it; warm_start.h).
  if (job->ForwardsInitialState()) replicator_->Notify(job);
  // Durable before the coordinator hands the job to workers, so a shard
  // that dies before the first checkpoint still comes back with the job.
  if (job->checkpointing) (void)checkpointer_->Write(job);
  resp->set_chunks_held(job->chunks.size());
  resp->set_bytes_held(job->bytes);
  return absl::OkStatus();
}

absl::Status Shard::DropJob(const DropJobRequest& req) {
  JobPtr job;
  {
    absl::MutexLock l(&mu_);
    auto it = jobs_.find(req.job_id());
    if (it == jobs_.end()) return absl::OkStatus();
    job = std::move(it->second);
    jobs_.erase(it);
    bytes_held_ -= job->bytes;
  }
  // A re-placement in progress ends with it (its reserved bytes go back).
  ReleaseReplacement(*job);
  internal::CloseJob(*job, absl::AbortedError(absl::StrCat(
                               "job \"", job->id, "\" was dropped from shard ",
                               options_.shard_id, " while this call waited")));
  if (job->checkpointing) checkpointer_->Remove(*job);
  return absl::OkStatus();
}

absl::Status Shard::SetMembership(const SetMembershipRequest& req) {
  JobPtr job;
  std::vector<uint8_t> active;
  std::vector<WaiterPtr> ready;
  std::vector<Chunk*> advanced;
  // A job that a re-placement retired meanwhile changes nothing: its
  // successor, in the map by then, takes the change.
  for (bool changed = false; !changed;) {
    PS_ASSIGN_OR_RETURN(job, FindJob(req.job_id()));
    PS_RETURN_IF_ERROR(internal::ValidateMembership(*job, req, &active));
    changed = internal::ChangeMembership(*job, active, &ready, &advanced);
  }
  internal::CompleteAll(&ready);
  if (job->tables != nullptr) job->tables->SetMembership(active);
  if (job->table_replicas != nullptr) {
    job->table_replicas->SetMembership(active);
  }
  checkpointer_->MaybeQueue(job, advanced, absl::InfinitePast());
  if (job->replicated && !advanced.empty()) {
    replicator_->Advanced(job, advanced);
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Checkpoints.

absl::Status Shard::OpenCheckpoints(RestoreReport* report) {
  *report = RestoreReport();
  if (options_.checkpoint_dir.empty()) return absl::OkStatus();
  {
    absl::MutexLock l(&mu_);
    if (shutdown_) {
      return absl::UnavailableError(
          absl::StrCat("shard ", options_.shard_id, " is shutting down"));
    }
    if (!jobs_.empty()) {
      return absl::FailedPreconditionError(
          "OpenCheckpoints must run before any job is registered");
    }
  }
  PS_ASSIGN_OR_RETURN(std::vector<std::string> ids,
                      checkpointer_->Open(options_.checkpoint_dir));
  for (const std::string& id : ids) {
    RestoreFromCheckpoint(id, report);
    RestorePrepared(id, report);  // a re-placement cut by the restart
  }
  checkpointer_->Start();
  return absl::OkStatus();
}

void Shard::RestoreFromCheckpoint(const std::string& id,
                                  RestoreReport* report) {
  // Each candidate, newest first, is restored into a fresh job; one that
  // fails (a bad tables file, a checkpoint that does not fit its
  // registration) is reported and the previous one tried.
  JobPtr job;
  int local_count = 0;
  uint64_t step = 0;
  auto accept = [&](JobCheckpoint& ck, const std::string&) -> absl::Status {
    job = nullptr;
    PS_ASSIGN_OR_RETURN(JobPtr fresh, NewJob(ck.registration, &local_count));
    step = ck.step;
    PS_RETURN_IF_ERROR(
        checkpointer_->Restore(std::move(ck), local_count, *fresh));
    job = std::move(fresh);
    return absl::OkStatus();
  };
  absl::StatusOr<CheckpointStore::Loaded> loaded =
      checkpointer_->Load(id, accept);
  if (!loaded.ok()) {
    report->problems.push_back(std::string(loaded.status().message()));
    return;
  }
  for (const absl::Status& s : loaded->rejected) {
    report->problems.push_back(absl::StrCat(
        s.message(), "; using the previous checkpoint ", loaded->path));
  }
  if (absl::Status st = AdmitRestored(job, local_count); !st.ok()) {
    report->problems.push_back(absl::StrCat("checkpoint ", loaded->path,
                                            ": job \"", id,
                                            "\" not restored: ", st.message()));
    return;
  }
  report->restored.push_back(
      absl::StrCat("job \"", id, "\" at step ", step, " from ", loaded->path));
}

absl::Status Shard::AdmitRestored(const JobPtr& job, int local_count) {
  absl::MutexLock l(&mu_);
  if (jobs_.contains(job->id)) {
    return absl::AlreadyExistsError("the job is already registered");
  }
  if (!FitsBudget(job->bytes)) return OverBudget(*job, local_count);
  bytes_held_ += job->bytes;
  jobs_[job->id] = job;
  return absl::OkStatus();
}

absl::Status Shard::CheckpointNow(const std::string& job_id) {
  PS_ASSIGN_OR_RETURN(JobPtr job, FindJob(job_id));
  if (!job->checkpointing) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job \"", job_id, "\" has no checkpoints on shard ", options_.shard_id,
        checkpointer_->enabled() ? " (spec.checkpoint asks for none)"
                                 : " (no checkpoint_dir)"));
  }
  return checkpointer_->Write(job);
}

void Shard::CheckCheckpoints(absl::Time now) {
  if (!checkpointer_->enabled()) return;
  for (const JobPtr& job : AllJobs()) {
    if (job->checkpointing && job->every_seconds > 0) {
      checkpointer_->MaybeQueue(job, {}, now);
    }
  }
}

void Shard::FlushCheckpoints() { checkpointer_->Flush(); }

// ---------------------------------------------------------------------------
// Pushes and pulls (Push and ApplyPush: shard_push.cc).

void Shard::PushPull(const PushPullRequest& req, PushPullResponse* resp,
                     std::function<void(absl::Status)> done,
                     std::vector<SharedBytes>* payloads) {
  PushPull(req, GradientsFrom(req.gradients()), resp, std::move(done),
           payloads);
}

std::function<void(absl::Status)> Shard::TracedDone(
    const JobPtr& job, uint32_t worker, uint64_t step, int64_t start_ns,
    std::function<void(absl::Status)> done) {
  return [job, worker, step, start_ns, done = std::move(done)](absl::Status s) {
    TraceSpan span;
    span.set_kind(TRACE_SHARD_REQUEST);
    span.set_step(step);
    span.set_worker(worker);
    span.set_start_ns(start_ns);
    span.set_end_ns(TraceRecorder::NowNs());
    job->trace.Add(span);
    done(std::move(s));
  };
}

absl::Status Shard::SetTrace(const SetTraceRequest& req) {
  const TraceWindow& w = req.window();
  PS_ASSIGN_OR_RETURN(JobPtr job, FindJob(w.job_id()));
  if (w.end_step() <= w.begin_step()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "window: empty step range [", w.begin_step(), ", ", w.end_step(), ")"));
  }
  if (w.end_step() - w.begin_step() > kTraceMaxSteps) {
    return absl::InvalidArgumentError(
        absl::StrCat("window: ", w.end_step() - w.begin_step(),
                     " steps; at most ", kTraceMaxSteps));
  }
  job->trace.SetWindow(w);
  return absl::OkStatus();
}

absl::Status Shard::GetTrace(const ShardTraceRequest& req,
                             ShardTrace* out) const {
  out->Clear();
  PS_ASSIGN_OR_RETURN(JobPtr job, FindJob(req.job_id()));
  TraceRecorder::Snapshot snap = job->trace.Copy();
  out->set_shard_id(options_.shard_id);
  *out->mutable_window() = std::move(snap.window);
  out->mutable_spans()->Reserve(static_cast<int>(snap.spans.size()));
  for (TraceSpan& s : snap.spans) *out->add_spans() = std::move(s);
  out->set_dropped(snap.dropped);
  return absl::OkStatus();
}

void Shard::PushPull(const PushPullRequest& req, const GradientsIn& gradients,
                     PushPullResponse* resp,
                     std::function<void(absl::Status)> done,
                     std::vector<SharedBytes>* payloads,
                     absl::Time hold_until) {
  const int64_t start_ns = absl::GetCurrentTimeNanos();
  resp->Clear();
  if (payloads != nullptr) payloads->clear();
  absl::StatusOr<JobPtr> job = FindJob(req.job_id());
  if (!job.ok()) return done(job.status());
  if (absl::Status st = internal::ValidatePlacementEpoch(
          **job, options_.shard_id, req.placement_epoch());
      !st.ok()) {
    return done(std::move(st));
  }
  // Delta pulls: checked before anything of the push is applied.
  std::vector<uint64_t> bases;
  {
    std::vector<uint32_t> ids;
    ids.reserve(gradients.size());
    for (const GradientIn& g : gradients) ids.push_back(g.chunk_id);
    if (absl::Status st =
            internal::ValidateHeld(**job, req.held(), ids, "gradients", &bases);
        !st.ok()) {
      return done(std::move(st));
    }
  }
  // Step timelines: the answer and, under ASP/SSP, the apply (BSP's is
  // recorded by the push that completes the step).
  const bool traced = (*job)->trace.Covers(req.step());
  // A held push runs again from the top, traced again there: the callback
  // as it came (kept only when traced, to copy nothing on the common path).
  std::function<void(absl::Status)> untraced;
  if (traced) {
    untraced = done;
    done =
        TracedDone(*job, req.worker(), req.step(), start_ns, std::move(done));
  }
  const int64_t apply_start_ns = traced ? TraceRecorder::NowNs() : 0;
  std::vector<Chunk*> chunks;
  absl::StatusOr<PushCounts> counts =
      ApplyPush(*job, req.worker(), req.step(), gradients, &chunks);
  if (!counts.ok() && HeldForPause(
                          **job, req.step(), counts.status(), hold_until,
                          [this, &req, &gradients, resp, payloads, hold_until,
                           again = traced ? untraced : done] {
                            PushPull(req, gradients, resp, again, payloads,
                                     hold_until);
                          },
                          done)) {
    return;
  }
  if (!counts.ok()) return done(counts.status());
  if (traced && (*job)->mode != BSP) {
    TraceSpan span;
    span.set_kind(TRACE_SHARD_APPLY);
    span.set_step(req.step());
    span.set_worker(req.worker());
    span.set_start_ns(apply_start_ns);
    span.set_end_ns(TraceRecorder::NowNs());
    (*job)->trace.Add(span);
  }
  // Written before the wait exists: afterwards only its claimer touches resp.
  resp->set_duplicates(counts->duplicates);
  resp->set_stale(counts->stale);
  WaiterPtr w = internal::NewWaiter(
      *job, next_waiter_id_.fetch_add(1, std::memory_order_relaxed),
      std::move(chunks), req.step(), resp->mutable_parameters(), payloads,
      std::move(done));
  w->worker = req.worker();
  w->bases = std::move(bases);
  w->start_ns = start_ns;
  w->method = internal::kPushPullMethod;
  internal::SetPushPullConditions(**job, req.step(), w.get());
  if (AwaitsReplicas(**job)) SetReplicaNeeds(w.get());
  internal::StartWait(*job, std::move(w));
}

void Shard::Pull(const PullRequest& req, PullResponse* resp,
                 std::function<void(absl::Status)> done,
                 std::vector<SharedBytes>* payloads) {
  const int64_t start_ns = absl::GetCurrentTimeNanos();
  resp->Clear();
  if (payloads != nullptr) payloads->clear();
  absl::StatusOr<JobPtr> job = FindJob(req.job_id());
  if (!job.ok()) return done(job.status());
  std::vector<Chunk*> chunks;
  std::vector<uint64_t> bases;
  if (absl::Status st = internal::ValidatePlacementEpoch(
          **job, options_.shard_id, req.placement_epoch());
      !st.ok()) {
    return done(std::move(st));
  }
  if (absl::Status st = internal::ValidatePull(**job, options_.shard_id, req,
                                               &chunks, &bases);
      !st.ok()) {
    return done(std::move(st));
  }
  WaiterPtr w = internal::NewWaiter(
      *job, next_waiter_id_.fetch_add(1, std::memory_order_relaxed),
      std::move(chunks), req.step(), resp->mutable_parameters(), payloads,
      std::move(done));
  w->worker = req.worker();
  w->bases = std::move(bases);
  w->start_ns = start_ns;
  w->method = internal::kPullMethod;
  internal::SetPullConditions(**job, req.step(), req.min_version(), w.get());
  internal::StartWait(*job, std::move(w));
}

// ---------------------------------------------------------------------------
// Deadlines, shutdown, stats.

void Shard::CheckDeadlines(absl::Time now) {
  for (const JobPtr& job : AllJobs()) internal::FailExpiredWaits(*job, now);
}

size_t Shard::PendingWaits() const {
  size_t n = 0;
  for (const JobPtr& job : AllJobs()) {
    absl::MutexLock l(&job->waits.mu);
    n += job->waits.live.size();
  }
  return n;
}

void Shard::Shutdown() {
  std::vector<JobPtr> jobs;
  {
    absl::MutexLock l(&mu_);
    shutdown_ = true;
    for (const auto& [id, job] : jobs_) jobs.push_back(job);
  }
  for (const JobPtr& job : jobs) {
    internal::CloseJob(
        *job, absl::UnavailableError(absl::StrCat("shard ", options_.shard_id,
                                                  " is shutting down")));
  }
  replicator_->Stop();
  checkpointer_->Shutdown(jobs);
}

void Shard::Stats(const StatsRequest& req, ShardStats* out) const {
  out->Clear();
  std::vector<JobPtr> jobs;
  uint64_t chunks = 0;
  {
    absl::ReaderMutexLock l(&mu_);
    out->set_jobs(jobs_.size());
    out->set_bytes_held(bytes_held_);
    for (const auto& [id, job] : jobs_) {
      chunks += job->chunks.size();
      if (req.job_id().empty() || req.job_id() == id) jobs.push_back(job);
    }
  }
  out->set_shard_id(options_.shard_id);
  out->set_address(options_.address);
  out->set_uptime_s(absl::ToDoubleSeconds(absl::Now() - start_time_));
  out->set_chunks(chunks);
  out->set_memory_budget_bytes(options_.memory_budget_bytes);
  rejected_.CopyTo(out->mutable_rejected());
  std::sort(jobs.begin(), jobs.end(),
            [](const JobPtr& a, const JobPtr& b) { return a->id < b->id; });
  for (const JobPtr& job : jobs) {
    internal::FillJobStats(*job, out->add_job_stats());
  }
}

}  // namespace ps
