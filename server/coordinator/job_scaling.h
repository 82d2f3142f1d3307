// The rules of `psctl scale` (ScaleJobRequest) over a job's rank slots: a
// job holds RankSlots(spec) ranks on the shards from its start (JobSpec.
// max_workers, else num_workers); its active ranks are a subset. A scale
// records its target in the job's ScaleStatus (stored with the job, so it
// survives a coordinator restart); growing, idle workers fill the lowest
// free slots; shrinking, the highest active ranks are asked to leave.
//
//   PS_RETURN_IF_ERROR(CheckScale(job, 4));
//   StartScale(job, 4, now);
//   while (std::optional<uint32_t> r = SlotToFill(job)) {
//     FillSlot(job, *r, worker.id, worker.name);  ... deliver, membership
//   }
//   UpdateScale(job, now);  // after every change of job.active
//
// Free functions over JobTable::Job: the owner serializes every call.
#ifndef SERVER_COORDINATOR_JOB_SCALING_H_
#define SERVER_COORDINATOR_JOB_SCALING_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/job.pb.h"
#include "server/coordinator/job_table.h"

namespace ps {

// OK when `job` may be scaled to `workers` now; else why not (nothing
// changed): FAILED_PRECONDITION for a job that is not running, a custom
// model, a policy other than SHRINK or a scale still in progress (unless
// `workers` is the active count, which ends it); INVALID_ARGUMENT for 0 or
// more than RankSlots.
absl::Status CheckScale(const JobTable::Job& job, uint32_t workers);

// FAILED_PRECONDITION ("job_id: job J is PENDING (starting); only a running
// job scales") unless the job runs: both kinds of scale check it first.
absl::Status CheckRunning(const JobTable::Job& job);

// Records a checked scale to `workers`, asked at `now`.
void StartScale(JobTable::Job& job, uint32_t workers, absl::Time now);

// Whether the job's last scale has not reached its target yet.
bool ScaleInProgress(const JobTable::Job& job);

// A scale down in progress: the highest active ranks beyond the target,
// which are to leave; empty otherwise.
std::vector<uint32_t> LeavingRanks(const JobTable::Job& job);

// The ranks that count toward a scale's target: the active ones, and for
// an elastic data job also those given to a worker that waits for the next
// segment of the plan.
size_t StaffedRanks(const JobTable::Job& job);

// An elastic data job's ranks for the next segment of its plan: those held
// by a worker, at most the scale's target of them (the lowest; ascending).
std::vector<uint32_t> DataMembers(const JobTable::Job& job);

// A running job growing toward its target: its lowest free slot (no worker,
// not active); nullopt when none is to be filled.
std::optional<uint32_t> SlotToFill(const JobTable::Job& job);

// Gives the free slot `rank` to worker `worker_id` named `name`: it joins
// the quorum (an elastic data job's: at the next segment of its plan).
void FillSlot(JobTable::Job& job, uint32_t rank, const std::string& worker_id,
              const std::string& name);

// After a change of job.active: the scale's active count and, the first
// time it equals the target, the time it was reached (logged).
void UpdateScale(JobTable::Job& job, absl::Time now);

// Logs the learning rate a membership of `job` steps with under its
// JobSpec.lr_rule (LR_RULE_LINEAR: lr x active / num_workers, per BSP step
// or per ASP/SSP push; nothing for LR_RULE_NONE, whose rate never changes).
void LogLearningRate(const JobTable::Job& job);

}  // namespace ps

#endif  // SERVER_COORDINATOR_JOB_SCALING_H_
