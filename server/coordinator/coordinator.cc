#include "server/coordinator/coordinator.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/coordinator/placement.h"
#include "spdlog/spdlog.h"

namespace ps {

struct JobCoordinator::Worker {
  std::string id;
  std::string name;
  uint64_t seq = 0;  // registration order
  absl::Time last_seen;
  // The job this worker holds a rank of; "" = idle.
  std::string job_id;
  uint32_t rank = 0;
  uint64_t start_step = 0;
  // Non-empty: the job it ran failed or was cancelled; said on Heartbeat
  // until the worker asks for new work.
  std::string abort_reason;
  // The parked long-poll, if any.
  std::function<void(absl::Status)> poll_done;
  GetAssignmentResponse* poll_response = nullptr;
  absl::Time poll_deadline;
};

struct JobCoordinator::Job {
  JobStatus status;
  // Holds its workers and waits for the shards' RegisterJob (still PENDING).
  bool registering = false;
  // By rank: the worker id ("" once lost), the worker name (kept for
  // rejoin and messages), whether it reported finished.
  std::vector<std::string> rank_worker;
  std::vector<std::string> rank_name;
  std::vector<bool> rank_finished;
  // Ranks counting toward the quorum; SHRINK removes lost ones.
  std::set<uint32_t> active;
  // The leader's latest samples_per_s: the job's rate if all num_workers
  // ran at its pace (see worker/trainer/trainer.h).
  float leader_samples_per_s = 0;

  const std::string& id() const { return status.job_id(); }
  bool Ended() const {
    return status.state() == SUCCEEDED || status.state() == FAILED ||
           status.state() == CANCELLED;
  }
  uint32_t Leader() const { return active.empty() ? 0 : *active.begin(); }
  // The job's samples/s counts only the live workers: the leader's pace
  // times the ranks still active (fewer than num_workers after SHRINK).
  void UpdateSamplesPerS() {
    const uint32_t n = status.spec().num_workers();
    if (n == 0) return;
    status.mutable_progress()->set_samples_per_s(leader_samples_per_s *
                                                 active.size() / n);
  }
};

namespace {

double UnixSeconds(absl::Time t) {
  return absl::ToDoubleSeconds(t - absl::UnixEpoch());
}

std::string WorkerLabel(const std::string& id, uint32_t rank,
                        const std::string& name) {
  return absl::StrFormat("worker %s (rank %d, %s)", id, rank, name);
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobCoordinator>> JobCoordinator::Create(
    Options options, ShardControl* shards) {
  if (shards == nullptr) {
    return absl::InvalidArgumentError("shards: must not be null");
  }
  if (options.num_shards == 0) {
    options.num_shards = static_cast<uint32_t>(options.shard_addresses.size());
  }
  if (options.num_shards == 0) {
    return absl::InvalidArgumentError(
        "num_shards: must be >= 1 (or list shard_addresses)");
  }
  if (!options.shard_addresses.empty() &&
      options.shard_addresses.size() != options.num_shards) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shard_addresses: %d addresses for num_shards = %d",
                        options.shard_addresses.size(), options.num_shards));
  }
  if (options.heartbeat_interval_ms == 0) {
    return absl::InvalidArgumentError("heartbeat_interval_ms: must be > 0");
  }
  if (options.worker_timeout_ms <= options.heartbeat_interval_ms) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "worker_timeout_ms: %d must exceed heartbeat_interval_ms (%d)",
        options.worker_timeout_ms, options.heartbeat_interval_ms));
  }
  if (!options.clock) options.clock = [] { return absl::Now(); };
  return std::unique_ptr<JobCoordinator>(
      new JobCoordinator(std::move(options), shards));
}

JobCoordinator::JobCoordinator(Options options, ShardControl* shards)
    : options_(std::move(options)),
      num_shards_(options_.num_shards),
      shards_(shards) {}

JobCoordinator::~JobCoordinator() { Shutdown(); }

void JobCoordinator::RunDone(DoneList& done) {
  for (auto& [callback, status] : done) callback(std::move(status));
  done.clear();
}

// ---------------------------------------------------------------------------
// Shard work.

void JobCoordinator::EnqueueShardOp(std::function<void()> op) {
  shard_ops_.push_back(std::move(op));
}

void JobCoordinator::DrainShardOps() {
  {
    absl::MutexLock lock(&mu_);
    if (draining_) return;  // that thread will run what we queued
    draining_ = true;
  }
  for (;;) {
    std::function<void()> op;
    {
      absl::MutexLock lock(&mu_);
      if (shard_ops_.empty()) {
        draining_ = false;
        return;
      }
      op = std::move(shard_ops_.front());
      shard_ops_.pop_front();
    }
    op();
  }
}

void JobCoordinator::EnqueueDrop(const std::string& job_id,
                                 uint32_t num_shards) {
  EnqueueShardOp([this, job_id, num_shards] {
    for (uint32_t s = 0; s < num_shards; ++s) {
      absl::Status status = shards_->DropJob(s, job_id);
      if (!status.ok()) {
        spdlog::warn("job {}: DropJob on shard {}: {}", job_id, s,
                     status.ToString());
      }
    }
  });
}

void JobCoordinator::EnqueueMembership(const Job& job) {
  SetMembershipRequest request;
  request.set_job_id(job.id());
  for (uint32_t rank : job.active) request.add_active_workers(rank);
  EnqueueShardOp([this, request = std::move(request)] {
    absl::Status failure;
    for (uint32_t s = 0; s < num_shards_ && failure.ok(); ++s) {
      absl::Status status = shards_->SetMembership(s, request);
      if (!status.ok()) {
        failure = absl::Status(
            status.code(),
            absl::StrCat("shard ", s, " SetMembership: ", status.message()));
      }
    }
    if (failure.ok()) return;
    absl::MutexLock lock(&mu_);
    Job* job = FindJob(request.job_id());
    // A shard that keeps waiting for the lost rank would stall every step.
    if (job != nullptr && job->status.state() == RUNNING) {
      EndJob(*job, FAILED,
             absl::StrCat("changing the quorum failed: ", failure.message()),
             options_.clock());
      MaybeStartJobs();
    }
  });
}

void JobCoordinator::RegisterOnShards(const std::string& job_id) {
  RegisterJobRequest request;
  {
    absl::MutexLock lock(&mu_);
    Job* job = FindJob(job_id);
    if (job == nullptr || !job->registering) return;  // cancelled meanwhile
    request.set_job_id(job_id);
    *request.mutable_spec() = job->status.spec();
    *request.mutable_placement() = job->status.placement();
    request.set_num_workers(job->status.spec().num_workers());
  }
  absl::Status failure;
  uint32_t attempted = 0;  // shards that may hold the job now
  for (uint32_t s = 0; s < num_shards_ && failure.ok(); ++s) {
    ++attempted;
    absl::Status status = shards_->RegisterJob(s, request);
    if (!status.ok()) {
      failure = absl::Status(
          status.code(),
          absl::StrCat("shard ", s, " RegisterJob: ", status.message()));
    }
  }

  DoneList done;
  {
    absl::MutexLock lock(&mu_);
    Job* job = FindJob(job_id);
    const bool still_starting = job->registering && !job->Ended();
    job->registering = false;
    const absl::Time now = options_.clock();
    if (!failure.ok()) {
      if (still_starting) {
        EndJob(*job, FAILED,
               absl::StrCat("registering on the shards failed: ",
                            failure.message()),
               now);
      }
      // Free what the other shards (and maybe the failing one) allocated.
      // A cancel has queued its own drop of every shard.
      if (job->status.state() != CANCELLED) EnqueueDrop(job_id, attempted);
    } else if (still_starting) {
      job->status.set_state(RUNNING);
      job->status.set_reason("");
      job->status.set_start_time_s(UnixSeconds(now));
      spdlog::info("job {} running on {} workers", job_id, job->active.size());
      for (const std::string& worker_id : job->rank_worker) {
        Worker* worker = FindWorker(worker_id);
        if (worker != nullptr) DeliverAssignment(*worker, done);
      }
      // A rank lost while registering (SHRINK) must not hold up the quorum.
      if (job->active.size() < job->rank_worker.size()) {
        EnqueueMembership(*job);
      }
    } else if (job->status.state() == FAILED) {
      // Failed while registering (a lost worker): nothing will run.
      EnqueueDrop(job_id, num_shards_);
    }
    MaybeStartJobs();
  }
  RunDone(done);
}

// ---------------------------------------------------------------------------
// State helpers (mu_ held).

JobCoordinator::Job* JobCoordinator::FindJob(const std::string& job_id) {
  auto it = jobs_by_id_.find(job_id);
  return it == jobs_by_id_.end() ? nullptr : it->second;
}

JobCoordinator::Worker* JobCoordinator::FindWorker(
    const std::string& worker_id) {
  auto it = workers_.find(worker_id);
  return it == workers_.end() ? nullptr : it->second.get();
}

void JobCoordinator::MaybeStartJobs() {
  std::vector<Worker*> idle;
  for (auto& [id, worker] : workers_) {
    if (worker->job_id.empty()) idle.push_back(worker.get());
  }
  std::sort(idle.begin(), idle.end(),
            [](const Worker* a, const Worker* b) { return a->seq < b->seq; });
  size_t next_idle = 0;
  while (!pending_.empty()) {
    Job& job = *pending_.front();
    const uint32_t n = job.status.spec().num_workers();
    if (idle.size() - next_idle < n) break;
    pending_.pop_front();
    job.registering = true;
    job.status.set_reason(
        absl::StrFormat("registering on %d shards", num_shards_));
    job.rank_worker.assign(n, "");
    job.rank_name.assign(n, "");
    job.rank_finished.assign(n, false);
    job.active.clear();
    job.status.clear_workers();
    for (uint32_t rank = 0; rank < n; ++rank) {
      Worker& worker = *idle[next_idle++];
      worker.job_id = job.id();
      worker.rank = rank;
      worker.start_step = 0;
      job.rank_worker[rank] = worker.id;
      job.rank_name[rank] = worker.name;
      job.active.insert(rank);
      job.status.add_workers(worker.name);
    }
    EnqueueShardOp([this, id = job.id()] { RegisterOnShards(id); });
  }
  // Say why the rest wait.
  const size_t idle_left = idle.size() - next_idle;
  for (size_t i = 0; i < pending_.size(); ++i) {
    JobStatus& status = pending_[i]->status;
    status.set_reason(
        i == 0 ? absl::StrFormat("waiting for workers: needs %d, %d idle",
                                 status.spec().num_workers(), idle_left)
               : absl::StrCat("queued behind ", pending_[0]->id()));
  }
}

void JobCoordinator::EndJob(Job& job, JobState state, const std::string& reason,
                            absl::Time now) {
  const bool was_pending = job.status.state() == PENDING && !job.registering;
  job.status.set_state(state);
  job.status.set_reason(reason);
  job.status.set_end_time_s(UnixSeconds(now));
  if (was_pending) {
    pending_.erase(std::remove(pending_.begin(), pending_.end(), &job),
                   pending_.end());
  }
  for (const std::string& worker_id : job.rank_worker) {
    Worker* worker = FindWorker(worker_id);
    if (worker == nullptr || worker->job_id != job.id()) continue;
    worker->job_id.clear();
    if (state != SUCCEEDED) {
      worker->abort_reason = absl::StrCat("job ", job.id(), " ",
                                          JobState_Name(state), ": ", reason);
    }
  }
  // A job still waiting for workers never reached the shards. Dropping a
  // failed job ends the waits of its surviving workers (ABORTED) at once,
  // instead of at their step deadline.
  if ((state == CANCELLED || state == FAILED) && !was_pending) {
    EnqueueDrop(job.id(), num_shards_);
  }
  if (state == FAILED) {
    spdlog::warn("job {} FAILED: {}", job.id(), reason);
  } else {
    spdlog::info("job {} {}: {}", job.id(), JobState_Name(state), reason);
  }
}

void JobCoordinator::LoseWorker(const std::string& worker_id,
                                const std::string& why, absl::Time now,
                                DoneList& done) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return;
  std::unique_ptr<Worker> worker = std::move(it->second);
  workers_.erase(it);
  CompletePoll(
      *worker,
      absl::NotFoundError(absl::StrCat("worker_id: ", worker_id, " was lost (",
                                       why, "); register again")),
      done);
  Job* job = worker->job_id.empty() ? nullptr : FindJob(worker->job_id);
  const std::string label =
      job == nullptr
          ? absl::StrFormat("worker %s (%s)", worker_id, worker->name)
          : WorkerLabel(worker_id, worker->rank, worker->name);
  const std::string event = absl::StrCat(label, " lost: ", why);
  if (job == nullptr || job->Ended()) {
    spdlog::info("{}", event);
    return;
  }
  job->rank_worker[worker->rank] = "";
  if (job->status.spec().on_worker_failure() != SHRINK) {
    EndJob(*job, FAILED, event, now);
    return;
  }
  job->active.erase(worker->rank);
  if (job->active.empty()) {
    EndJob(*job, FAILED, absl::StrCat("every worker lost; last: ", event), now);
    return;
  }
  spdlog::warn("job {}: {}; continuing with ranks {}", job->id(), event,
               absl::StrJoin(job->active, ","));
  job->UpdateSamplesPerS();
  job->status.set_reason(absl::StrCat("shrunk: ", event));
  if (job->rank_finished[job->Leader()]) {
    EndJob(
        *job, SUCCEEDED,
        absl::StrFormat("finished at step %d", job->status.progress().step()),
        now);
    return;
  }
  // While registering, RegisterOnShards sends the membership once it runs.
  if (job->status.state() == RUNNING) EnqueueMembership(*job);
}

void JobCoordinator::MaybeRejoin(Worker& worker, DoneList& done) {
  for (const std::unique_ptr<Job>& job : jobs_) {
    if (job->status.state() != RUNNING) continue;
    for (uint32_t rank = 0; rank < job->rank_worker.size(); ++rank) {
      if (!job->rank_worker[rank].empty() || job->rank_finished[rank] ||
          job->rank_name[rank] != worker.name) {
        continue;
      }
      worker.job_id = job->id();
      worker.rank = rank;
      worker.start_step = job->status.progress().step();
      job->rank_worker[rank] = worker.id;
      job->active.insert(rank);
      job->UpdateSamplesPerS();
      job->status.set_reason(absl::StrFormat(
          "%s rejoined at step %d", WorkerLabel(worker.id, rank, worker.name),
          worker.start_step));
      spdlog::info("job {}: {}", job->id(), job->status.reason());
      EnqueueMembership(*job);
      DeliverAssignment(worker, done);
      return;
    }
  }
}

bool JobCoordinator::FillAssignment(const Worker& worker,
                                    GetAssignmentResponse* response) {
  if (worker.job_id.empty()) return false;
  const Job* job = FindJob(worker.job_id);
  if (job == nullptr || job->status.state() != RUNNING) return false;
  Assignment* a = response->mutable_assignment();
  a->set_job_id(job->id());
  *a->mutable_spec() = job->status.spec();
  *a->mutable_placement() = job->status.placement();
  a->set_rank(worker.rank);
  a->set_num_workers(job->status.spec().num_workers());
  for (const std::string& address : options_.shard_addresses) {
    a->add_shard_addresses(address);
  }
  a->set_start_step(worker.start_step);
  return true;
}

void JobCoordinator::DeliverAssignment(Worker& worker, DoneList& done) {
  if (!worker.poll_done) return;
  if (FillAssignment(worker, worker.poll_response)) {
    CompletePoll(worker, absl::OkStatus(), done);
  }
}

void JobCoordinator::CompletePoll(Worker& worker, absl::Status status,
                                  DoneList& done) {
  if (!worker.poll_done) return;
  done.emplace_back(std::move(worker.poll_done), std::move(status));
  worker.poll_done = nullptr;
  worker.poll_response = nullptr;
}

// ---------------------------------------------------------------------------
// Jobs.

absl::Status JobCoordinator::SubmitJob(const SubmitJobRequest& request,
                                       SubmitJobResponse* response) {
  response->Clear();
  ValidationContext ctx = options_.validation;
  ctx.num_shards = num_shards_;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return absl::UnavailableError("coordinator shutting down");
    ctx.num_registered_workers = static_cast<uint32_t>(workers_.size());
  }
  // Outside the lock: the data_dir check touches the file system.
  std::vector<std::string> problems;
  absl::StatusOr<JobSpec> spec =
      NormalizeJobSpec(request.spec(), ctx, &problems);
  for (const std::string& p : problems) response->add_problems(p);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<Placement> placement = PlaceChunks(*spec, num_shards_);
  if (!placement.ok()) {
    response->add_problems(std::string(placement.status().message()));
    return placement.status();
  }
  *response->mutable_spec() = *spec;
  *response->mutable_placement() = *placement;
  if (request.dry_run()) return absl::OkStatus();

  DoneList done;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return absl::UnavailableError("coordinator shutting down");
    auto job = std::make_unique<Job>();
    const std::string id = absl::StrFormat("job-%06d", next_job_++);
    job->status.set_job_id(id);
    job->status.set_name(spec->name());
    job->status.set_state(PENDING);
    *job->status.mutable_spec() = *std::move(spec);
    *job->status.mutable_placement() = *std::move(placement);
    job->status.mutable_progress()->set_test_accuracy(-1);
    job->status.set_submit_time_s(UnixSeconds(options_.clock()));
    jobs_by_id_[id] = job.get();
    pending_.push_back(job.get());
    jobs_.push_back(std::move(job));
    response->set_job_id(id);
    spdlog::info("job {} ({}) submitted", id, jobs_.back()->status.name());
    MaybeStartJobs();
  }
  RunDone(done);
  DrainShardOps();
  return absl::OkStatus();
}

absl::Status JobCoordinator::GetJob(const GetJobRequest& request,
                                    JobStatus* response) {
  absl::MutexLock lock(&mu_);
  const Job* job = FindJob(request.job_id());
  if (job == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("job_id: unknown job \"", request.job_id(), "\""));
  }
  *response = job->status;
  return absl::OkStatus();
}

absl::Status JobCoordinator::ListJobs(const ListJobsRequest& request,
                                      ListJobsResponse* response) {
  absl::MutexLock lock(&mu_);
  response->Clear();
  for (const std::unique_ptr<Job>& job : jobs_) {
    *response->add_jobs() = job->status;
  }
  return absl::OkStatus();
}

absl::Status JobCoordinator::CancelJob(const CancelJobRequest& request,
                                       CancelJobResponse* response) {
  DoneList done;
  {
    absl::MutexLock lock(&mu_);
    Job* job = FindJob(request.job_id());
    if (job == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("job_id: unknown job \"", request.job_id(), "\""));
    }
    const JobState state = job->status.state();
    if (state == SUCCEEDED || state == FAILED) {
      return absl::FailedPreconditionError(
          absl::StrCat("job_id: job ", job->id(), " already ended ",
                       JobState_Name(state), ": ", job->status.reason()));
    }
    if (state != CANCELLED) {
      EndJob(*job, CANCELLED, "cancelled by user", options_.clock());
      MaybeStartJobs();
    }
    response->set_state(CANCELLED);
  }
  RunDone(done);
  DrainShardOps();
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Workers.

absl::Status JobCoordinator::RegisterWorker(
    const RegisterWorkerRequest& request, RegisterWorkerResponse* response) {
  if (request.name().empty()) {
    return absl::InvalidArgumentError("name: must be set");
  }
  DoneList done;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return absl::UnavailableError("coordinator shutting down");
    const absl::Time now = options_.clock();
    // The same name again means the process restarted: the old one is gone.
    std::vector<std::string> replaced;
    for (const auto& [id, worker] : workers_) {
      if (worker->name == request.name()) replaced.push_back(id);
    }
    for (const std::string& id : replaced) {
      LoseWorker(id, "registered again (restarted)", now, done);
    }
    auto worker = std::make_unique<Worker>();
    worker->seq = next_worker_++;
    worker->id = absl::StrCat("w-", worker->seq);
    worker->name = request.name();
    worker->last_seen = now;
    Worker& w = *worker;
    workers_[w.id] = std::move(worker);
    spdlog::info("worker {} ({}) registered with devices [{}]", w.id, w.name,
                 absl::StrJoin(request.devices(), ", "));
    MaybeRejoin(w, done);
    MaybeStartJobs();
    response->set_worker_id(w.id);
    response->set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
  }
  RunDone(done);
  DrainShardOps();
  return absl::OkStatus();
}

absl::Status JobCoordinator::Heartbeat(const HeartbeatRequest& request,
                                       HeartbeatResponse* response) {
  absl::MutexLock lock(&mu_);
  response->Clear();
  Worker* worker = FindWorker(request.worker_id());
  if (worker == nullptr) {
    response->set_reregister(true);
    return absl::OkStatus();
  }
  worker->last_seen = options_.clock();
  if (!worker->abort_reason.empty()) {
    response->set_abort_job(true);
    response->set_reason(worker->abort_reason);
  }
  return absl::OkStatus();
}

void JobCoordinator::GetAssignment(const GetAssignmentRequest& request,
                                   GetAssignmentResponse* response,
                                   std::function<void(absl::Status)> done) {
  DoneList to_run;
  {
    absl::MutexLock lock(&mu_);
    response->Clear();
    Worker* worker = FindWorker(request.worker_id());
    if (shutdown_) {
      to_run.emplace_back(std::move(done),
                          absl::UnavailableError("coordinator shutting down"));
    } else if (worker == nullptr) {
      to_run.emplace_back(std::move(done),
                          absl::NotFoundError(absl::StrCat(
                              "worker_id: unknown worker \"",
                              request.worker_id(), "\"; register again")));
    } else {
      const absl::Time now = options_.clock();
      worker->last_seen = now;
      // Asking for work means it has stopped whatever it ran before.
      worker->abort_reason.clear();
      CompletePoll(*worker, absl::OkStatus(), to_run);  // superseded
      if (FillAssignment(*worker, response) || request.wait_ms() == 0) {
        to_run.emplace_back(std::move(done), absl::OkStatus());
      } else {
        worker->poll_done = std::move(done);
        worker->poll_response = response;
        // Capped: a parked poll must not outlive the worker's timeout.
        worker->poll_deadline =
            now + absl::Milliseconds(
                      std::min(request.wait_ms(), options_.worker_timeout_ms));
      }
    }
  }
  RunDone(to_run);
}

absl::Status JobCoordinator::ReportProgress(const ProgressReport& request,
                                            ProgressReportResponse* response) {
  response->Clear();
  DoneList done;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = options_.clock();
    if (Worker* worker = FindWorker(request.worker_id())) {
      worker->last_seen = now;
    }
    Job* job = FindJob(request.job_id());
    if (job == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("job_id: unknown job \"", request.job_id(), "\""));
    }
    if (job->status.state() != RUNNING) {
      response->set_abort_job(true);
      response->set_reason(absl::StrCat("job ", job->id(), " is ",
                                        JobState_Name(job->status.state()),
                                        ": ", job->status.reason()));
      return absl::OkStatus();
    }
    const uint32_t rank = request.rank();
    if (rank >= job->rank_worker.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("rank: %d out of range [0, %d) for job %s", rank,
                          job->rank_worker.size(), job->id()));
    }
    if (job->rank_worker[rank] != request.worker_id()) {
      response->set_abort_job(true);
      response->set_reason(absl::StrFormat(
          "worker %s does not hold rank %d of job %s (lost or replaced)",
          request.worker_id(), rank, job->id()));
      return absl::OkStatus();
    }
    const std::string label =
        WorkerLabel(request.worker_id(), rank, job->rank_name[rank]);
    if (!request.error().empty()) {
      const std::string reason =
          absl::StrCat(label, " failed: ", request.error());
      EndJob(*job, FAILED, reason, now);
      response->set_abort_job(true);
      response->set_reason(reason);
    } else {
      const bool leader = rank == job->Leader();
      if (leader) {
        *job->status.mutable_progress() = request.progress();
        job->leader_samples_per_s = request.progress().samples_per_s();
        job->UpdateSamplesPerS();
      }
      if (request.finished()) {
        job->rank_finished[rank] = true;
        // Done with this job: free for the next one.
        if (Worker* worker = FindWorker(request.worker_id())) {
          worker->job_id.clear();
        }
        if (leader) {
          const Progress& p = job->status.progress();
          std::string reason = absl::StrFormat("finished at step %d", p.step());
          if (p.test_accuracy() >= 0) {
            absl::StrAppendFormat(&reason, ", test accuracy %.4f",
                                  p.test_accuracy());
          }
          EndJob(*job, SUCCEEDED, reason, now);
        }
      }
    }
    MaybeStartJobs();
  }
  RunDone(done);
  DrainShardOps();
  return absl::OkStatus();
}

void JobCoordinator::Tick(absl::Time now) {
  DoneList done;
  {
    absl::MutexLock lock(&mu_);
    const absl::Duration timeout =
        absl::Milliseconds(options_.worker_timeout_ms);
    struct Silent {
      uint64_t seq;
      std::string id;
      absl::Duration silent;
    };
    std::vector<Silent> lost;
    for (auto& [id, worker] : workers_) {
      if (worker->poll_done && worker->poll_deadline <= now) {
        CompletePoll(*worker, absl::OkStatus(), done);
      }
      const absl::Duration silent = now - worker->last_seen;
      if (silent >= timeout) lost.push_back({worker->seq, id, silent});
    }
    // Registration order, so that outcomes do not depend on hash order.
    std::sort(lost.begin(), lost.end(),
              [](const Silent& a, const Silent& b) { return a.seq < b.seq; });
    for (const Silent& s : lost) {
      LoseWorker(s.id,
                 absl::StrFormat("no heartbeat for %.1f s",
                                 absl::ToDoubleSeconds(s.silent)),
                 now, done);
    }
    MaybeStartJobs();
  }
  RunDone(done);
  DrainShardOps();
}

void JobCoordinator::Shutdown() {
  DoneList done;
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
    for (auto& [id, worker] : workers_) {
      CompletePoll(*worker, absl::UnavailableError("coordinator shutting down"),
                   done);
    }
  }
  RunDone(done);
}

}  // namespace ps
