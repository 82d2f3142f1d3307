// Workerd's data plans: an elastic data job's trainer asks the coordinator
// which examples a step reads (GetDataPlan; server/coordinator/data_plan.h).
#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "spdlog/spdlog.h"
#include "worker/workerd.h"

namespace ps {
namespace {

// The longest a joining worker waits for the job's workers to reach the step
// it joins at (an epoch boundary under DATA_RESCALE_EPOCH); a job whose
// epochs last longer cannot grow.
constexpr absl::Duration kDataPlanWait = absl::Minutes(10);
constexpr absl::Duration kDataPlanCallDeadline = absl::Seconds(10);
constexpr absl::Duration kFirstRetry = absl::Milliseconds(2);
constexpr absl::Duration kMaxRetry = absl::Milliseconds(50);

}  // namespace

ElasticBatches::AskPlan Workerd::DataPlanFor(const Assignment& assignment) {
  if (!assignment.elastic_data()) return nullptr;
  return [this](uint64_t step, uint64_t examples) {
    return AskDataPlan(step, examples);
  };
}

absl::StatusOr<GetDataPlanResponse> Workerd::AskDataPlan(
    uint64_t step, uint64_t train_examples) {
  GetDataPlanRequest req;
  req.set_worker_id(session_->worker_id());
  req.set_step(step);
  req.set_train_examples(train_examples);
  const absl::Time deadline = absl::Now() + kDataPlanWait;
  absl::Duration backoff = kFirstRetry;
  for (;;) {
    GetDataPlanResponse resp;
    absl::Status s = FromGrpcStatus(stub_->GetDataPlan(
        NewContext(kDataPlanCallDeadline).get(), req, &resp));
    if (s.ok()) {
      const auto& ranks = resp.segment().ranks();
      if (!resp.done() && std::find(ranks.begin(), ranks.end(),
                                    session_->snapshot().rank) == ranks.end()) {
        // The trainer stops before `step`; RunJob then unregisters.
        scaled_down_ = true;
      }
      return resp;
    }
    // Not planned yet (this worker joins at the next segment), or the
    // coordinator is briefly away: ask again.
    if (s.code() != absl::StatusCode::kUnavailable) {
      return absl::Status(s.code(), absl::StrCat("data plan of step ", step,
                                                 ": ", s.message()));
    }
    if (session_->abort_requested()) {
      return absl::CancelledError("job aborted while waiting for its plan");
    }
    if (absl::Now() + backoff > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "data plan of step ", step, ": not planned within ",
          absl::FormatDuration(kDataPlanWait), " (", s.message(), ")"));
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, kMaxRetry);
  }
}

}  // namespace ps
