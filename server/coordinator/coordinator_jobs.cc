// JobCoordinator's jobs: submit, inspect, cancel, progress reports, and the
// state machine that starts them (idle workers take ranks, RegisterJob on
// every shard) and ends them (EndJob, DropJob on the shards).
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/not_retryable.h"
#include "common/status_macros.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/job_scaling.h"
#include "server/coordinator/placement.h"
#include "server/coordinator/warm_start.h"
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

// `st`, also listed in response->problems when it is an error.
absl::Status Problem(absl::Status st, SubmitJobResponse* response) {
  if (!st.ok()) response->add_problems(std::string(st.message()));
  return st;
}

}  // namespace

// ---------------------------------------------------------------------------
// Job RPCs.

absl::Status JobCoordinator::SubmitJob(const SubmitJobRequest& request,
                                       SubmitJobResponse* response) {
  response->Clear();
  ValidationContext ctx = options_.validation;
  ctx.num_shards = num_shards_;
  if (replicas_ != nullptr) ctx.failed_shards = replicas_->failed();
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return ShuttingDown();
    ctx.num_registered_workers = static_cast<uint32_t>(workers_.size());
  }
  // Outside the lock: the data_dir and init.from_file checks touch the
  // file system.
  PS_RETURN_IF_ERROR(NormalizeAndPlace(request.spec(), ctx, response));
  PS_RETURN_IF_ERROR(Problem(CheckFromFile(response->spec()), response));
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return ShuttingDown();
    PS_RETURN_IF_ERROR(Problem(
        ResolveFromJob(jobs_, options_.succeeded_jobs_kept,
                       response->mutable_spec(), response->mutable_placement()),
        response));
  }
  if (response->spec().init().has_from_job()) {
    // The job took its source's shards: are k of them live?
    const std::vector<std::string> found =
        ReplicationProblems(response->spec(), ctx);
    for (const std::string& p : found) response->add_problems(p);
    if (!found.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("job spec has ", found.size(),
                       found.size() == 1 ? " problem: " : " problems: ",
                       absl::StrJoin(found, "; ")));
    }
  }
  if (request.dry_run()) return absl::OkStatus();
  MaybeArmReplicas(response->spec());
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
      // Retrying the same call at once would fail the same way.
      return NotRetryable(absl::UnavailableError(
          absl::StrCat("job not submitted: ", stored.message())));
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

// ---------------------------------------------------------------------------
// The state machine (mu_ held).

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
  if (end.state == SUCCEEDED) DropOldSucceeded();
}

void JobCoordinator::DropOldSucceeded() {
  const std::vector<Job*> done = jobs_.SucceededNewestFirst();
  for (size_t i = options_.succeeded_jobs_kept; i < done.size(); ++i) {
    if (done[i]->dropped) continue;
    done[i]->dropped = true;
    spdlog::info("job {}: dropped from the shards ({} newer jobs succeeded)",
                 done[i]->id(), i);
    shard_ops_.EnqueueDrop(done[i]->id(), num_shards_);
  }
}

// ---------------------------------------------------------------------------
// Starting a job on the shards: work queued under mu_, run by the draining
// thread.

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
  LogLearningRate(job);
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
  // Every rank slot (JobSpec.max_workers): StartRunning's membership
  // leaves the unfilled ones out of the quorum.
  request.set_num_workers(RankSlots(job->status.spec()));
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

}  // namespace ps
