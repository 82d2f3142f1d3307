// JobCoordinator's elastic jobs: ScaleJob and the growth that follows it
// (job_scaling.h has the rules; shrinking is the heartbeats' leave_job and
// the workers' Unregister, in coordinator_workers.cc).
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/data_plan.h"
#include "server/coordinator/job_scaling.h"
#include "spdlog/spdlog.h"

namespace ps {

absl::Status JobCoordinator::ScaleJob(const ScaleJobRequest& request,
                                      ScaleJobResponse* response) {
  response->Clear();
  CompletedPolls done;
  absl::Status persisted;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return ShuttingDown();
    PS_ASSIGN_OR_RETURN(Job * job, jobs_.Get(request.job_id()));
    if (request.shards() != 0 || request.drain_size() > 0) {
      if (request.workers() != 0 ||
          (request.shards() != 0 && request.drain_size() > 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat(request.workers() != 0 ? "workers" : "drain",
                         ": set either workers or shards or drain, only one"));
      }
      PS_RETURN_IF_ERROR(StartReshard(*job, request, response));
      return Persist();
    }
    PS_RETURN_IF_ERROR(CheckScale(*job, request.workers()));
    const absl::Time now = options_.clock();
    StartScale(*job, request.workers(), now);
    MaybeGrow(now, done);
    *response->mutable_scale() = job->status.scale();
    persisted = Persist();
  }
  done.Run();
  shard_ops_.Drain();
  return persisted;
}

void JobCoordinator::MaybeGrow(absl::Time now, CompletedPolls& done) {
  for (const std::unique_ptr<Job>& job : jobs_.all()) {
    if (!SlotToFill(*job).has_value()) continue;
    bool grew = false;
    for (Worker* worker : workers_.IdleInOrder()) {
      if (!worker->joined_job.empty()) continue;  // a custom model's worker
      const std::optional<uint32_t> rank = SlotToFill(*job);
      if (!rank.has_value()) break;
      // It starts at the job's last reported step; the steps the others
      // ran since, it pushes as stale (dropped) and catches up. An elastic
      // data job's joiner starts where the plan's next segment will.
      const uint64_t start = UsesElasticData(job->status.spec())
                                 ? job->status.data_plan().planned_until()
                                 : job->status.progress().step();
      WorkerRegistry::AssignRank(*worker, job->id(), *rank, start);
      FillSlot(*job, *rank, worker->id, worker->name);
      DeliverAssignment(*worker, done);
      grew = true;
    }
    if (!grew || UsesElasticData(job->status.spec())) continue;
    UpdateScale(*job, now);
    EnqueueMembership(*job);
  }
}

}  // namespace ps
