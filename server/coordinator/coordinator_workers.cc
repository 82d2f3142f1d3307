// JobCoordinator's workers: registration (and rejoining a SHRINK job's lost
// rank), heartbeats, the assignment long-poll, leaving (Unregister) and
// losing a worker.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/data_plan.h"
#include "server/coordinator/job_scaling.h"
#include "spdlog/spdlog.h"

namespace ps {

// ---------------------------------------------------------------------------
// Worker RPCs.

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
    worker.registering = true;
    spdlog::info("worker {} ({}) registered with devices [{}]{}", worker.id,
                 worker.name, absl::StrJoin(request.devices(), ", "),
                 worker.joined_job.empty()
                     ? ""
                     : absl::StrCat(" for job ", worker.joined_job));
    MaybeRejoin(worker, done);
    MaybeGrow(now, done);
    MaybeStartJobs();
    response->set_worker_id(worker.id);
    response->set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
    // Not refused when the store fails: the worker would register again
    // and lose the worker just added (and maybe its job's rank).
    Persist().IgnoreError();  // logged
  }
  done.Run();
  shard_ops_.Drain();
  // Answered now: its heartbeats are due from here on.
  absl::MutexLock lock(&mu_);
  Worker* worker = workers_.Find(response->worker_id());
  if (worker != nullptr) {
    worker->registering = false;
    NoteContact(*worker, options_.clock());
  }
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
  response->set_replica_epoch(replica_epoch());
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
    // An elastic data job's leavers stop where the next segment of its plan
    // leaves them out (coordinator_data_plan.cc).
    if (job.ok() && !UsesElasticData((*job)->status.spec())) {
      const std::vector<uint32_t> leaving = LeavingRanks(**job);
      if (std::find(leaving.begin(), leaving.end(), worker->rank) !=
          leaving.end()) {
        response->set_leave_job(worker->job_id);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status JobCoordinator::Unregister(const UnregisterRequest& request,
                                        UnregisterResponse* response) {
  response->Clear();
  CompletedPolls done;
  {
    absl::MutexLock lock(&mu_);
    if (workers_.Find(request.worker_id()) == nullptr) return absl::OkStatus();
    response->set_known(true);
    // Every step below next_step came back to the worker, so each had its
    // push on every shard: the membership change drops nothing of it.
    std::string why = request.next_step() == 0
                          ? std::string("before its first step")
                          : absl::StrFormat("after step %d (the last counted)",
                                            request.next_step() - 1);
    // The caller's words, bounded: they go into the job's reason.
    constexpr size_t kMaxReason = 200;
    if (!request.reason().empty()) {
      absl::StrAppend(
          &why, ", ",
          absl::string_view(request.reason()).substr(0, kMaxReason));
    }
    LoseWorker(request.worker_id(), why, options_.clock(), done,
               /*left=*/true);
    MaybeStartJobs();
    Persist().IgnoreError();  // logged; a reload loses it after the timeout
  }
  done.Run();
  shard_ops_.Drain();
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
    } else if (!request.job_id().empty()) {
      // A refresh (its shard refused the placement epoch): at once.
      NoteContact(*worker, options_.clock());
      absl::Status st = absl::OkStatus();
      if (worker->job_id != request.job_id() ||
          !FillAssignment(*worker, response)) {
        st = absl::NotFoundError(absl::StrCat("job_id: worker ", worker->id,
                                              " holds no rank in running job ",
                                              request.job_id()));
      }
      to_run.Add(std::move(done), st);
    } else {
      // A worker back from a job may be what a scale waits for.
      if (worker->job_id.empty()) MaybeGrow(options_.clock(), to_run);
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

// ---------------------------------------------------------------------------
// Steps (mu_ held).

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

void JobCoordinator::LoseWorker(const std::string& worker_id,
                                const std::string& why, absl::Time now,
                                CompletedPolls& done, bool left) {
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
  const std::string event =
      absl::StrCat(label, left ? " left: " : " lost: ", why);
  if (job == nullptr || job->Ended()) {
    spdlog::info("{}", event);
    return;
  }
  // A rank left cleanly is free for any worker (a scale), not kept for a
  // restart of this one.
  if (left) job->rank_name[worker->rank].clear();
  std::optional<JobEnd> end = JobTable::LoseRank(*job, worker->rank, event);
  UpdateScale(*job, now);
  if (end.has_value()) {
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
  UpdateScale(*job, options_.clock());
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
  a->set_num_workers(RankSlots(job->status.spec()));
  std::vector<std::string> addresses = options_.current_shard_addresses
                                           ? options_.current_shard_addresses()
                                           : options_.shard_addresses;
  RedirectFailedShards(job->status.placement(), &addresses);
  for (const std::string& address : addresses) a->add_shard_addresses(address);
  a->set_start_step(worker.start_step);
  a->set_elastic_data(UsesElasticData(job->status.spec()));
  return true;
}

void JobCoordinator::DeliverAssignment(Worker& worker, CompletedPolls& done) {
  if (!worker.poll_done) return;
  if (FillAssignment(worker, worker.poll_response)) {
    WorkerRegistry::CompletePoll(worker, absl::OkStatus(), done);
  }
}

}  // namespace ps
