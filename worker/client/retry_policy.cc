#include "worker/client/retry_policy.h"

#include <algorithm>
#include <cstdint>

#include "absl/time/clock.h"
#include "common/not_retryable.h"

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

bool RetryPolicy::RetriesPaused(const absl::Status& status, int attempt,
                                absl::Time* paused_since) const {
  if (!IsPausedForReplacement(status)) {
    *paused_since = absl::InfinitePast();
    return Retries(status, attempt);
  }
  // A pause lasts while what moves is copied: bounded by the time a step
  // may wait for the others, not by the attempts.
  const absl::Time now = absl::Now();
  if (*paused_since == absl::InfinitePast()) *paused_since = now;
  return now - *paused_since < attempt_deadline_;
}

absl::Duration RetryPolicy::Backoff(int attempt) const {
  const absl::Duration backoff =
      options_.initial_backoff *
      (int64_t{1} << std::min(attempt - 1, kMaxBackoffDoublings));
  return std::min(backoff, options_.max_backoff);
}

}  // namespace ps
