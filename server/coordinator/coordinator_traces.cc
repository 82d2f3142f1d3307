// JobCoordinator's step timelines: StartTrace, UploadTrace and GetTrace over
// the TraceStore (trace_store.h); in memory only, never waiting on shards.
#include <cstdint>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/coordinator/coordinator.h"

namespace ps {

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

}  // namespace ps
