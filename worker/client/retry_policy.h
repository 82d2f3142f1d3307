// RetryPolicy: the one rule by which the worker's clients of the shards
// (AsyncPsClient, GrpcSparseClient) time and retry their calls: how long an
// attempt may take, which failures go again, and after what backoff.
//
//   RetryPolicy retry(RetryPolicy::Options{...}, spec.consistency(),
//                     StepDeadlineRule::kEveryMode);
//   call->context->set_deadline(
//       absl::ToChronoTime(absl::Now() + retry.attempt_deadline()));
//   ...
//   if (retry.Retries(status, call->attempt)) {
//     call->retry_at = absl::Now() + retry.Backoff(call->attempt);
//   }
//
// Attempt deadline: calls that wait for other workers (BSP/SSP) outlive the
// job's step deadline by kStepDeadlineMargin, so the shard's own error,
// which names the missing workers, arrives first; never less than
// rpc_deadline. Backoff: initial_backoff doubling per attempt (at most
// kMaxBackoffDoublings times), capped at max_backoff. Only UNAVAILABLE is
// retried, and only while attempts are left (max_attempts in all). A retry
// keeps the call's (worker, step) and sends attempt + 1, so the shard
// applies a push once.
//
// Immutable after construction: thread-safe.
#ifndef WORKER_CLIENT_RETRY_POLICY_H_
#define WORKER_CLIENT_RETRY_POLICY_H_

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/defaults.h"
#include "proto/job.pb.h"

namespace ps {

// Calls that wait for other workers outlive the job's step deadline by this
// much.
inline constexpr absl::Duration kStepDeadlineMargin = absl::Seconds(5);
// Backoff doubles per attempt up to this many doublings (then max_backoff).
inline constexpr int kMaxBackoffDoublings = 16;

// Which calls the step deadline (+ margin) covers. The two clients have
// always differed here; each keeps its rule.
enum class StepDeadlineRule {
  // Every mode, ASP too, with the job's step_deadline_ms as given (0: the
  // margin alone): AsyncPsClient.
  kEveryMode,
  // BSP and SSP only (ASP: rpc_deadline), with step_deadline_ms 0 read as
  // kDefaultStepDeadlineMs: GrpcSparseClient.
  kWaitingModes,
};

class RetryPolicy {
 public:
  // PsClientOptions' fields of the same names.
  struct Options {
    absl::Duration rpc_deadline = absl::Milliseconds(kDefaultRpcDeadlineMs);
    int max_attempts = kDefaultRpcMaxAttempts;
    absl::Duration initial_backoff =
        absl::Milliseconds(kDefaultRpcInitialBackoffMs);
    absl::Duration max_backoff = absl::Milliseconds(kDefaultRpcMaxBackoffMs);
  };

  RetryPolicy(const Options& options, const ConsistencySpec& consistency,
              StepDeadlineRule rule);

  // The deadline of one attempt, from when it is sent.
  absl::Duration attempt_deadline() const { return attempt_deadline_; }
  // Whether a call whose attempt number `attempt` (1 = the first) ended
  // with `status` goes again.
  bool Retries(const absl::Status& status, int attempt) const;
  // The same for a call that may meet a re-placement's pause: a shard's
  // answer that the job pauses (IsPausedForReplacement) goes again until
  // the attempt deadline has passed since the first such answer
  // (`*paused_since`, InfinitePast when none; kept by the caller per call),
  // however many attempts that takes; any other answer resets it.
  bool RetriesPaused(const absl::Status& status, int attempt,
                     absl::Time* paused_since) const;
  // How long the call waits before attempt `attempt` + 1.
  absl::Duration Backoff(int attempt) const;

 private:
  const Options options_;
  const absl::Duration attempt_deadline_;
};

}  // namespace ps

#endif  // WORKER_CLIENT_RETRY_POLICY_H_
