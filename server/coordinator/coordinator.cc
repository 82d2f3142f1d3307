#include "server/coordinator/coordinator.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/coordinator/placement.h"
#include "spdlog/spdlog.h"

namespace ps {
namespace {

// The first field where `b` differs from `a`, as MessageDifferencer says it
// ("modified: tensors[1].shape[0]: 32 -> 16"); "" when they are equal.
std::string FirstDifference(const JobSpec& a, const JobSpec& b) {
  std::string report;
  google::protobuf::util::MessageDifferencer differ;
  differ.ReportDifferencesToString(&report);
  if (differ.Compare(a, b)) return "";
  const size_t end = report.find('\n');
  return report.substr(0, end);
}

absl::Status ShuttingDown() {
  return absl::UnavailableError("coordinator shutting down");
}

// Fills in num_shards from shard_addresses and the clock; INVALID_ARGUMENT
// naming the field.
absl::Status CheckOptions(JobCoordinator::Options& options) {
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
  return absl::OkStatus();
}

// Validates, normalizes and places `spec` into response's spec and
// placement; every problem goes into response->problems.
absl::Status NormalizeAndPlace(const JobSpec& spec,
                               const ValidationContext& ctx,
                               SubmitJobResponse* response) {
  std::vector<std::string> problems;
  absl::StatusOr<JobSpec> normalized = NormalizeJobSpec(spec, ctx, &problems);
  for (const std::string& p : problems) response->add_problems(p);
  PS_RETURN_IF_ERROR(normalized.status());
  absl::StatusOr<Placement> placement =
      PlaceChunks(*normalized, ctx.num_shards);
  if (!placement.ok()) {
    response->add_problems(std::string(placement.status().message()));
    return placement.status();
  }
  *response->mutable_spec() = *std::move(normalized);
  *response->mutable_placement() = *std::move(placement);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobCoordinator>> JobCoordinator::Create(
    Options options, ShardControl* shards) {
  if (shards == nullptr) {
    return absl::InvalidArgumentError("shards: must not be null");
  }
  PS_RETURN_IF_ERROR(CheckOptions(options));
  std::unique_ptr<JobCoordinator> coordinator(
      new JobCoordinator(std::move(options), shards));
  if (coordinator->options_.store != nullptr) {
    PS_RETURN_IF_ERROR(coordinator->Restore());
  }
  return coordinator;
}

JobCoordinator::JobCoordinator(Options options, ShardControl* shards)
    : options_(std::move(options)),
      num_shards_(options_.num_shards),
      shard_ops_(shards, num_shards_),
      sync_(options_.store),
      history_(options_.max_history_points) {}

absl::Status JobCoordinator::Restore() {
  {
    absl::MutexLock lock(&mu_);
    restored_at_ = options_.clock();
    PS_RETURN_IF_ERROR(sync_.Restore(restored_at_, jobs_, workers_));
    size_t live = 0;
    for (const std::unique_ptr<Job>& job : jobs_.all()) {
      PS_ASSIGN_OR_RETURN(std::vector<Progress> curve,
                          options_.store->History(job->id()));
      history_.Set(job->id(), std::move(curve));
      if (job->Ended()) continue;
      ++live;
      // Its RegisterJob may or may not have reached every shard.
      if (job->registering) EnqueueRegister(job->id());
    }
    spdlog::info(
        "job store {}: reloaded {} jobs ({} not ended) and {} workers; next "
        "job id number {}",
        options_.store->path(), jobs_.all().size(), live, workers_.size(),
        jobs_.next_job());
    MaybeStartJobs();
    PS_RETURN_IF_ERROR(Persist());
  }
  shard_ops_.Drain();
  return absl::OkStatus();
}

absl::Status JobCoordinator::Persist() {
  absl::Status s = sync_.Flush(jobs_, workers_);
  if (!s.ok()) {
    spdlog::error("{} (kept in memory; written with the next change)",
                  std::string(s.message()));
  }
  return s;
}

void JobCoordinator::NoteContact(Worker& worker, absl::Time now) {
  worker.last_seen = now;
  if (!worker.restored) return;
  worker.restored = false;
  spdlog::info(
      "worker {} ({}) reattached {:.3f} s after the coordinator "
      "reloaded its state{}",
      worker.id, worker.name, absl::ToDoubleSeconds(now - restored_at_),
      worker.job_id.empty() ? ""
                            : absl::StrFormat(" (rank %d of job %s)",
                                              worker.rank, worker.job_id));
}

JobCoordinator::~JobCoordinator() { Shutdown(); }

// ---------------------------------------------------------------------------
// Shard work.

void JobCoordinator::EnqueueRegister(const std::string& job_id) {
  shard_ops_.EnqueueRegister(
      [this, job_id] { return RegisterRequest(job_id); },
      [this, job_id](absl::Status failure, uint32_t asked) {
        FinishRegistering(job_id, failure, asked);
      });
}

void JobCoordinator::EnqueueMembership(const Job& job) {
  SetMembershipRequest request;
  request.set_job_id(job.id());
  for (uint32_t rank : job.active) request.add_active_workers(rank);
  shard_ops_.EnqueueMembership(std::move(request),
                               [this, id = job.id()](absl::Status failure) {
                                 MembershipFailed(id, failure);
                               });
}

void JobCoordinator::MembershipFailed(const std::string& job_id,
                                      const absl::Status& failure) {
  absl::MutexLock lock(&mu_);
  Job* job = jobs_.Find(job_id);
  if (job == nullptr || job->status.state() != RUNNING) return;
  EndJob(
      *job,
      {FAILED, absl::StrCat("changing the quorum failed: ", failure.message())},
      options_.clock());
  MaybeStartJobs();
  Persist().IgnoreError();  // logged
}

std::optional<RegisterJobRequest> JobCoordinator::RegisterRequest(
    const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  const Job* job = jobs_.Find(job_id);
  if (job == nullptr || !job->registering) return std::nullopt;  // cancelled
  RegisterJobRequest request;
  request.set_job_id(job_id);
  *request.mutable_spec() = job->status.spec();
  *request.mutable_placement() = job->status.placement();
  request.set_num_workers(job->status.spec().num_workers());
  return request;
}

void JobCoordinator::FinishRegistering(const std::string& job_id,
                                       const absl::Status& failure,
                                       uint32_t asked) {
  CompletedPolls done;
  {
    absl::MutexLock lock(&mu_);
    Job& job = *jobs_.Find(job_id);
    const bool still_starting = JobTable::StopRegistering(job);
    const absl::Time now = options_.clock();
    if (!failure.ok()) {
      if (still_starting) {
        EndJob(job,
               {FAILED, absl::StrCat("registering on the shards failed: ",
                                     failure.message())},
               now);
      }
      // Free what the other shards (and maybe the failing one) allocated.
      // A cancel has queued its own drop of every shard.
      if (job.status.state() != CANCELLED) {
        shard_ops_.EnqueueDrop(job_id, asked);
      }
    } else if (still_starting) {
      StartRunning(job, now, done);
    } else if (job.status.state() == FAILED) {
      // Failed while registering (a lost worker): nothing will run.
      shard_ops_.EnqueueDrop(job_id, num_shards_);
    }
    MaybeStartJobs();
    Persist().IgnoreError();  // logged
  }
  done.Run();
}

void JobCoordinator::StartRunning(Job& job, absl::Time now,
                                  CompletedPolls& done) {
  JobTable::MarkRunning(job, now);
  for (const std::string& worker_id : job.rank_worker) {
    Worker* worker = workers_.Find(worker_id);
    if (worker != nullptr) DeliverAssignment(*worker, done);
  }
  // A rank lost while registering (SHRINK) must not hold up the quorum.
  if (job.active.size() < job.rank_worker.size()) EnqueueMembership(job);
}

// ---------------------------------------------------------------------------
// Steps (mu_ held).

void JobCoordinator::MaybeStartJobs() {
  // Idle workers that joined no job, and those that joined each job.
  std::vector<Worker*> idle;
  absl::flat_hash_map<std::string, std::vector<Worker*>> joined;
  for (Worker* worker : workers_.IdleInOrder()) {
    if (worker->joined_job.empty()) {
      idle.push_back(worker);
    } else {
      joined[worker->joined_job].push_back(worker);
    }
  }
  const JobTable::JoinedCount joined_count = [&joined](const Job& job) {
    auto it = joined.find(job.id());
    return it == joined.end() ? size_t{0} : it->second.size();
  };
  size_t next_idle = 0;
  while (Job* job = jobs_.PopStartable(idle.size() - next_idle, joined_count)) {
    const uint32_t n = job->status.spec().num_workers();
    const bool custom = job->status.spec().model().has_custom();
    std::vector<std::string> ids, names;
    for (uint32_t rank = 0; rank < n; ++rank) {
      Worker& worker = custom ? *joined[job->id()][rank] : *idle[next_idle++];
      WorkerRegistry::AssignRank(worker, job->id(), rank, /*start_step=*/0);
      ids.push_back(worker.id);
      names.push_back(worker.name);
    }
    JobTable::BeginRegistering(*job, ids, names, num_shards_);
    EnqueueRegister(job->id());
  }
  jobs_.ExplainPending(idle.size() - next_idle, joined_count);
}

absl::Status JobCoordinator::CheckJoin(const std::string& job_id,
                                       const std::string& name) {
  PS_ASSIGN_OR_RETURN(const Job* job, jobs_.Get(job_id));
  const JobStatus& status = job->status;
  if (!status.spec().model().has_custom()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job_id: job ", job_id,
                     " trains a built-in model; workerd runs it, a worker "
                     "joins only a custom model's job"));
  }
  if (job->Ended()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job_id: job ", job_id, " already ended ",
                     JobState_Name(status.state()), ": ", status.reason()));
  }
  if (status.state() == PENDING && !job->registering) return absl::OkStatus();
  if (std::optional<std::pair<Job*, uint32_t>> rejoin = jobs_.FindRejoin(name);
      rejoin.has_value() && rejoin->first == job) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "job_id: job ", job_id, " already has its ", status.spec().num_workers(),
      " workers (", JobState_Name(status.state()),
      job->registering ? ", starting" : "", ")"));
}

void JobCoordinator::EndJob(Job& job, const JobEnd& end, absl::Time now) {
  const bool left_queue = jobs_.End(job, end, now);
  workers_.ReleaseFromJob(
      job.rank_worker, job.id(),
      end.state == SUCCEEDED
          ? ""
          : absl::StrCat("job ", job.id(), " ", JobState_Name(end.state), ": ",
                         end.reason));
  // A job still waiting for workers never reached the shards. Dropping a
  // failed job ends the waits of its surviving workers (ABORTED) at once,
  // instead of at their step deadline.
  if ((end.state == CANCELLED || end.state == FAILED) && left_queue) {
    shard_ops_.EnqueueDrop(job.id(), num_shards_);
  }
}

void JobCoordinator::LoseWorker(const std::string& worker_id,
                                const std::string& why, absl::Time now,
                                CompletedPolls& done) {
  std::unique_ptr<Worker> worker = workers_.Remove(worker_id);
  if (worker == nullptr) return;
  WorkerRegistry::CompletePoll(
      *worker,
      absl::NotFoundError(absl::StrCat("worker_id: ", worker_id, " was lost (",
                                       why, "); register again")),
      done);
  Job* job = worker->job_id.empty() ? nullptr : jobs_.Find(worker->job_id);
  const std::string label =
      job == nullptr
          ? absl::StrFormat("worker %s (%s)", worker_id, worker->name)
          : WorkerLabel(worker_id, worker->rank, worker->name);
  const std::string event = absl::StrCat(label, " lost: ", why);
  if (job == nullptr || job->Ended()) {
    spdlog::info("{}", event);
    return;
  }
  if (std::optional<JobEnd> end =
          JobTable::LoseRank(*job, worker->rank, event)) {
    EndJob(*job, *end, now);
  } else if (job->status.state() == RUNNING) {
    // While registering, FinishRegistering sends the membership.
    EnqueueMembership(*job);
  }
}

void JobCoordinator::MaybeRejoin(Worker& worker, CompletedPolls& done) {
  std::optional<std::pair<Job*, uint32_t>> found =
      jobs_.FindRejoin(worker.name);
  if (!found.has_value()) return;
  auto [job, rank] = *found;
  // A custom model's rank goes back only to a worker that joined that job,
  // a built-in model's only to one that joined none.
  const bool custom = job->status.spec().model().has_custom();
  if (custom ? worker.joined_job != job->id() : !worker.joined_job.empty()) {
    return;
  }
  WorkerRegistry::AssignRank(worker, job->id(), rank,
                             job->status.progress().step());
  JobTable::Rejoin(*job, rank, worker.id, worker.start_step);
  EnqueueMembership(*job);
  DeliverAssignment(worker, done);
}

bool JobCoordinator::FillAssignment(const Worker& worker,
                                    GetAssignmentResponse* response) {
  if (worker.job_id.empty()) return false;
  const Job* job = jobs_.Find(worker.job_id);
  if (job == nullptr || job->status.state() != RUNNING) return false;
  Assignment* a = response->mutable_assignment();
  a->set_job_id(job->id());
  *a->mutable_spec() = job->status.spec();
  *a->mutable_placement() = job->status.placement();
  a->set_rank(worker.rank);
  a->set_num_workers(job->status.spec().num_workers());
  const std::vector<std::string> addresses =
      options_.current_shard_addresses ? options_.current_shard_addresses()
                                       : options_.shard_addresses;
  for (const std::string& address : addresses) a->add_shard_addresses(address);
  a->set_start_step(worker.start_step);
  return true;
}

void JobCoordinator::DeliverAssignment(Worker& worker, CompletedPolls& done) {
  if (!worker.poll_done) return;
  if (FillAssignment(worker, worker.poll_response)) {
    WorkerRegistry::CompletePoll(worker, absl::OkStatus(), done);
  }
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
    if (shutdown_) return ShuttingDown();
    ctx.num_registered_workers = static_cast<uint32_t>(workers_.size());
  }
  // Outside the lock: the data_dir check touches the file system.
  PS_RETURN_IF_ERROR(NormalizeAndPlace(request.spec(), ctx, response));
  if (request.dry_run()) return absl::OkStatus();
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return ShuttingDown();
    // Found and added under one lock: concurrent joiners make one job.
    if (const Job* live = request.join_existing()
                              ? jobs_.FindLive(response->spec().name())
                              : nullptr) {
      const std::string difference =
          FirstDifference(live->status.spec(), response->spec());
      if (!difference.empty()) {
        const std::string problem =
            absl::StrCat("name: job ", live->id(), " \"", live->status.name(),
                         "\" is ", JobState_Name(live->status.state()),
                         " with another spec; first difference: ", difference);
        response->add_problems(problem);
        return absl::FailedPreconditionError(problem);
      }
      response->set_job_id(live->id());
      response->set_joined(true);
      *response->mutable_spec() = live->status.spec();
      *response->mutable_placement() = live->status.placement();
      return absl::OkStatus();
    }
    const Job& job =
        jobs_.Add(response->spec(), response->placement(), options_.clock());
    const std::string id = job.id();
    if (absl::Status stored = Persist(); !stored.ok()) {
      jobs_.Unadd(id);
      return absl::UnavailableError(
          absl::StrCat("job not submitted: ", stored.message()));
    }
    response->set_job_id(id);
    spdlog::info("job {} ({}) submitted", id, job.status.name());
    MaybeStartJobs();
    // The job is stored; a failure to store its start is logged and
    // retried with the next change.
    Persist().IgnoreError();
  }
  shard_ops_.Drain();
  return absl::OkStatus();
}

absl::Status JobCoordinator::GetJob(const GetJobRequest& request,
                                    JobStatus* response) {
  absl::MutexLock lock(&mu_);
  PS_ASSIGN_OR_RETURN(const Job* job, jobs_.Get(request.job_id()));
  *response = job->status;
  return absl::OkStatus();
}

absl::Status JobCoordinator::ListJobs(const ListJobsRequest& request,
                                      ListJobsResponse* response) {
  absl::MutexLock lock(&mu_);
  jobs_.List(response);
  return absl::OkStatus();
}

absl::Status JobCoordinator::GetHistory(const GetHistoryRequest& request,
                                        GetHistoryResponse* response) {
  response->Clear();
  std::vector<Progress> points;
  {
    absl::MutexLock lock(&mu_);
    PS_RETURN_IF_ERROR(jobs_.Get(request.job_id()).status());
    points = history_.Get(request.job_id());
  }
  response->set_job_id(request.job_id());
  for (Progress& p : points) *response->add_points() = std::move(p);
  return absl::OkStatus();
}

absl::Status JobCoordinator::CancelJob(const CancelJobRequest& request,
                                       CancelJobResponse* response) {
  absl::Status persisted;
  {
    absl::MutexLock lock(&mu_);
    PS_ASSIGN_OR_RETURN(Job * job, jobs_.Get(request.job_id()));
    const JobState state = job->status.state();
    if (state == SUCCEEDED || state == FAILED) {
      return absl::FailedPreconditionError(
          absl::StrCat("job_id: job ", job->id(), " already ended ",
                       JobState_Name(state), ": ", job->status.reason()));
    }
    if (state != CANCELLED) {
      EndJob(*job, {CANCELLED, "cancelled by user"}, options_.clock());
      MaybeStartJobs();
    }
    response->set_state(CANCELLED);
    persisted = Persist();
  }
  shard_ops_.Drain();
  return persisted;
}

// ---------------------------------------------------------------------------
// Workers.

absl::Status JobCoordinator::RegisterWorker(
    const RegisterWorkerRequest& request, RegisterWorkerResponse* response) {
  if (request.name().empty()) {
    return absl::InvalidArgumentError("name: must be set");
  }
  CompletedPolls done;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return ShuttingDown();
    const absl::Time now = options_.clock();
    // The same name again means the process restarted: the old one is gone.
    for (const std::string& id : workers_.IdsNamed(request.name())) {
      LoseWorker(id, "registered again (restarted)", now, done);
    }
    if (!request.job_id().empty()) {
      PS_RETURN_IF_ERROR(CheckJoin(request.job_id(), request.name()));
    }
    Worker& worker = workers_.Add(request.name(), now);
    worker.joined_job = request.job_id();
    spdlog::info("worker {} ({}) registered with devices [{}]{}", worker.id,
                 worker.name, absl::StrJoin(request.devices(), ", "),
                 worker.joined_job.empty()
                     ? ""
                     : absl::StrCat(" for job ", worker.joined_job));
    MaybeRejoin(worker, done);
    MaybeStartJobs();
    response->set_worker_id(worker.id);
    response->set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
    // Not refused when the store fails: the worker would register again
    // and lose the worker just added (and maybe its job's rank).
    Persist().IgnoreError();  // logged
  }
  done.Run();
  shard_ops_.Drain();
  return absl::OkStatus();
}

absl::Status JobCoordinator::Heartbeat(const HeartbeatRequest& request,
                                       HeartbeatResponse* response) {
  absl::MutexLock lock(&mu_);
  response->Clear();
  Worker* worker = workers_.Find(request.worker_id());
  if (worker == nullptr) {
    response->set_reregister(true);
    return absl::OkStatus();
  }
  NoteContact(*worker, options_.clock());
  if (!worker->abort_reason.empty()) {
    response->set_abort_job(true);
    response->set_reason(worker->abort_reason);
  }
  if (!worker->job_id.empty()) {
    const TraceWindow* window = traces_.Window(worker->job_id);
    if (window != nullptr) *response->mutable_trace() = *window;
    absl::StatusOr<Job*> job = jobs_.Get(worker->job_id);
    if (job.ok() && (*job)->status.state() == RUNNING &&
        (*job)->Leader() == worker->rank &&
        (*job)->rank_worker[worker->rank] == worker->id) {
      response->set_leads_job(worker->job_id);
    }
  }
  return absl::OkStatus();
}

absl::Status JobCoordinator::StartTrace(const StartTraceRequest& request,
                                        StartTraceResponse* response) {
  response->Clear();
  absl::MutexLock lock(&mu_);
  PS_ASSIGN_OR_RETURN(Job * job, jobs_.Get(request.window().job_id()));
  if (job->Ended()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job_id: job ", job->id(), " already ended ",
                     JobState_Name(job->status.state())));
  }
  PS_RETURN_IF_ERROR(traces_.Start(request.window()));
  response->set_step(job->status.progress().step());
  return absl::OkStatus();
}

absl::Status JobCoordinator::UploadTrace(const UploadTraceRequest& request) {
  absl::MutexLock lock(&mu_);
  PS_ASSIGN_OR_RETURN(Job * job, jobs_.Get(request.window().job_id()));
  const uint32_t rank = request.rank();
  if (rank >= job->rank_worker.size() ||
      job->rank_worker[rank] != request.worker_id()) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker_id: ", request.worker_id(), " does not hold rank ",
                     rank, " of job ", job->id()));
  }
  return traces_.Upload(request,
                        static_cast<uint32_t>(job->rank_worker.size()));
}

absl::Status JobCoordinator::GetTrace(const GetTraceRequest& request,
                                      GetTraceResponse* response) {
  response->Clear();
  absl::MutexLock lock(&mu_);
  PS_ASSIGN_OR_RETURN(Job * job, jobs_.Get(request.job_id()));
  response->set_num_workers(static_cast<uint32_t>(job->rank_worker.size()));
  traces_.Get(request.job_id(),
              request.has_rank() ? std::optional<uint32_t>(request.rank())
                                 : std::nullopt,
              response);
  return absl::OkStatus();
}

void JobCoordinator::GetAssignment(const GetAssignmentRequest& request,
                                   GetAssignmentResponse* response,
                                   std::function<void(absl::Status)> done) {
  CompletedPolls to_run;
  {
    absl::MutexLock lock(&mu_);
    response->Clear();
    Worker* worker = workers_.Find(request.worker_id());
    if (shutdown_) {
      to_run.Add(std::move(done), ShuttingDown());
    } else if (worker == nullptr) {
      to_run.Add(std::move(done),
                 absl::NotFoundError(
                     absl::StrCat("worker_id: unknown worker \"",
                                  request.worker_id(), "\"; register again")));
    } else {
      AnswerOrPark(*worker, request, response, std::move(done), to_run);
      Persist().IgnoreError();  // logged
    }
  }
  to_run.Run();
}

void JobCoordinator::AnswerOrPark(Worker& worker,
                                  const GetAssignmentRequest& request,
                                  GetAssignmentResponse* response,
                                  std::function<void(absl::Status)> callback,
                                  CompletedPolls& done) {
  const absl::Time now = options_.clock();
  NoteContact(worker, now);
  // Asking for work means it has stopped whatever it ran before.
  worker.abort_reason.clear();
  WorkerRegistry::CompletePoll(worker, absl::OkStatus(), done);  // superseded
  if (FillAssignment(worker, response) || request.wait_ms() == 0) {
    done.Add(std::move(callback), absl::OkStatus());
    return;
  }
  // Capped: a parked poll must not outlive the worker's timeout.
  WorkerRegistry::Park(
      worker, response, std::move(callback),
      now + absl::Milliseconds(
                std::min(request.wait_ms(), options_.worker_timeout_ms)));
}

absl::Status JobCoordinator::ReportProgress(const ProgressReport& request,
                                            ProgressReportResponse* response) {
  response->Clear();
  absl::Status persisted;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = options_.clock();
    Worker* worker = workers_.Find(request.worker_id());
    if (worker != nullptr) NoteContact(*worker, now);
    PS_ASSIGN_OR_RETURN(Job * job, jobs_.Get(request.job_id()));
    PS_ASSIGN_OR_RETURN(std::string abort,
                        JobTable::CheckReport(*job, request));
    if (!abort.empty()) {
      response->set_abort_job(true);
      response->set_reason(abort);
      return absl::OkStatus();
    }
    // Done with this job: free for the next one.
    if (request.finished() && request.error().empty() && worker != nullptr) {
      worker->job_id.clear();
    }
    if (request.error().empty() && request.rank() == job->Leader()) {
      sync_.AddProgress(job->id(), request.progress());
      history_.Add(job->id(), request.progress());
    }
    if (std::optional<JobEnd> end = JobTable::ApplyReport(*job, request)) {
      EndJob(*job, *end, now);
      if (end->state == FAILED) {
        response->set_abort_job(true);
        response->set_reason(end->reason);
      }
    }
    MaybeStartJobs();
    persisted = Persist();
  }
  shard_ops_.Drain();
  return persisted;
}

void JobCoordinator::Tick(absl::Time now) {
  CompletedPolls done;
  {
    absl::MutexLock lock(&mu_);
    workers_.ExpirePolls(now, done);
    for (const WorkerRegistry::Silent& s : workers_.SilentAt(
             now, absl::Milliseconds(options_.worker_timeout_ms))) {
      LoseWorker(s.id,
                 absl::StrFormat("no heartbeat for %.1f s",
                                 absl::ToDoubleSeconds(s.silent)),
                 now, done);
    }
    MaybeStartJobs();
    Persist().IgnoreError();  // logged
  }
  done.Run();
  shard_ops_.Drain();
}

void JobCoordinator::Shutdown() {
  CompletedPolls done;
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
    workers_.CompleteAllPolls(ShuttingDown(), done);
  }
  done.Run();
}

}  // namespace ps
