// JobCoordinator's data plans (GetDataPlan): an elastic data job's workers
// ask which examples a step reads; the step after the plan is sealed when a
// worker of the last segment asks, and a new segment's ranks become the
// quorum before that worker hears the answer (data_plan.h has the rules).
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/data_plan.h"
#include "server/coordinator/job_scaling.h"
#include "spdlog/spdlog.h"

namespace ps {

absl::Status JobCoordinator::GetDataPlan(const GetDataPlanRequest& request,
                                         GetDataPlanResponse* response) {
  response->Clear();
  bool quorum_changed = false;
  absl::Status persisted;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return ShuttingDown();
    Worker* worker = workers_.Find(request.worker_id());
    if (worker == nullptr || worker->job_id.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker_id: ", request.worker_id(), " holds no rank of a job"));
    }
    PS_ASSIGN_OR_RETURN(Job * job, jobs_.Get(worker->job_id));
    if (job->status.state() != RUNNING) {
      return absl::FailedPreconditionError(
          absl::StrCat("job_id: job ", job->id(), " is ",
                       JobState_Name(job->status.state())));
    }
    if (!UsesElasticData(job->status.spec())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job_id: job ", job->id(), " has no data plan (not elastic)"));
    }
    PS_ASSIGN_OR_RETURN(
        PlanAnswer answer,
        AnswerDataPlan(*job->status.mutable_data_plan(), job->status.spec(),
                       request.step(), request.train_examples(), worker->rank,
                       DataMembers(*job), response));
    if (answer == PlanAnswer::kNotYet) {
      return absl::UnavailableError(absl::StrCat(
          "step: ", request.step(), " of job ", job->id(),
          " is not planned yet (its workers have not reached it)"));
    }
    if (answer == PlanAnswer::kSealed) {
      quorum_changed = FollowSegment(*job, response->segment());
    }
    if (answer == PlanAnswer::kSealed || response->done()) {
      persisted = Persist();
    }
  }
  // The shards have the new quorum before the sealing worker (and so any
  // worker) pushes a step of the segment.
  if (quorum_changed) shard_ops_.DrainAll();
  return persisted;
}

bool JobCoordinator::FollowSegment(Job& job, const DataSegment& segment) {
  std::set<uint32_t> active(segment.ranks().begin(), segment.ranks().end());
  // Under ASP and SSP a leaving worker may still be behind the segment's
  // start: it stays in the quorum until it unregisters.
  if (job.status.spec().consistency().mode() != BSP) {
    active.insert(job.active.begin(), job.active.end());
  }
  spdlog::info(
      "job {}: from step {} (epoch {}, {} examples of it read) the "
      "data is split over ranks [{}]",
      job.id(), segment.start_step(), segment.epoch(), segment.offset(),
      absl::StrJoin(segment.ranks(), ", "));
  if (active == job.active) return false;
  job.active = std::move(active);
  UpdateScale(job, options_.clock());
  EnqueueMembership(job);
  return true;
}

}  // namespace ps
