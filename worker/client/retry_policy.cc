#include "worker/client/retry_policy.h"

#include <algorithm>
#include <cstdint>

namespace ps {
namespace {

absl::Duration AttemptDeadline(const RetryPolicy::Options& options,
                               const ConsistencySpec& consistency,
                               StepDeadlineRule rule) {
  uint32_t step_ms = consistency.step_deadline_ms();
  if (rule == StepDeadlineRule::kWaitingModes) {
    if (consistency.mode() == ASP) return options.rpc_deadline;
    if (step_ms == 0) step_ms = kDefaultStepDeadlineMs;
  }
  return std::max(options.rpc_deadline,
                  absl::Milliseconds(step_ms) + kStepDeadlineMargin);
}

}  // namespace

RetryPolicy::RetryPolicy(const Options& options,
                         const ConsistencySpec& consistency,
                         StepDeadlineRule rule)
    : options_(options),
      attempt_deadline_(AttemptDeadline(options, consistency, rule)) {}

bool RetryPolicy::Retries(const absl::Status& status, int attempt) const {
  return status.code() == absl::StatusCode::kUnavailable &&
         attempt < options_.max_attempts;
}

absl::Duration RetryPolicy::Backoff(int attempt) const {
  const absl::Duration backoff =
      options_.initial_backoff *
      (int64_t{1} << std::min(attempt - 1, kMaxBackoffDoublings));
  return std::min(backoff, options_.max_backoff);
}

}  // namespace ps
