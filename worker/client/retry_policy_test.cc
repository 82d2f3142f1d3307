#include "worker/client/retry_policy.h"

#include "common/not_retryable.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

ConsistencySpec Consistency(ConsistencyMode mode, uint32_t step_deadline_ms) {
  ConsistencySpec c;
  c.set_mode(mode);
  c.set_step_deadline_ms(step_deadline_ms);
  return c;
}

RetryPolicy::Options Options() {
  RetryPolicy::Options o;
  o.rpc_deadline = absl::Seconds(10);
  o.max_attempts = 4;
  o.initial_backoff = absl::Milliseconds(50);
  o.max_backoff = absl::Milliseconds(300);
  return o;
}

TEST(RetryPolicyTest, AttemptDeadlinePerRule) {
  struct Case {
    ConsistencyMode mode;
    uint32_t step_ms;
    StepDeadlineRule rule;
    absl::Duration want;
  };
  const Case cases[] = {
      // The dense client: every mode, step_deadline_ms as given.
      {BSP, 20000, StepDeadlineRule::kEveryMode, absl::Seconds(25)},
      {ASP, 20000, StepDeadlineRule::kEveryMode, absl::Seconds(25)},
      {BSP, 0, StepDeadlineRule::kEveryMode, absl::Seconds(10)},
      {BSP, 1000, StepDeadlineRule::kEveryMode, absl::Seconds(10)},
      // The sparse client: ASP gets rpc_deadline; 0 is the default.
      {BSP, 20000, StepDeadlineRule::kWaitingModes, absl::Seconds(25)},
      {ASP, 20000, StepDeadlineRule::kWaitingModes, absl::Seconds(10)},
      {SSP, 0, StepDeadlineRule::kWaitingModes,
       absl::Milliseconds(kDefaultStepDeadlineMs) + kStepDeadlineMargin},
  };
  for (const Case& c : cases) {
    RetryPolicy policy(Options(), Consistency(c.mode, c.step_ms), c.rule);
    EXPECT_EQ(policy.attempt_deadline(), c.want)
        << "mode " << c.mode << " step_ms " << c.step_ms;
  }
}

TEST(RetryPolicyTest, OnlyUnavailableWithAttemptsLeftRetries) {
  RetryPolicy policy(Options(), Consistency(BSP, 0),
                     StepDeadlineRule::kEveryMode);
  EXPECT_TRUE(policy.Retries(absl::UnavailableError("x"), 1));
  EXPECT_TRUE(policy.Retries(absl::UnavailableError("x"), 3));
  EXPECT_FALSE(policy.Retries(absl::UnavailableError("x"), 4));
  EXPECT_FALSE(policy.Retries(absl::DeadlineExceededError("x"), 1));
  EXPECT_FALSE(policy.Retries(absl::InternalError("x"), 1));
  EXPECT_FALSE(policy.Retries(absl::OkStatus(), 1));
}

// A re-placement's pause goes again past max_attempts, while the attempt
// deadline since its first answer has not passed; another answer resets it.
TEST(RetryPolicyTest, APauseRetriesPastTheAttemptsUntilTheDeadline) {
  RetryPolicy policy(Options(), Consistency(BSP, 0),
                     StepDeadlineRule::kEveryMode);
  const absl::Status paused =
      PausedForReplacement(absl::UnavailableError("paused"));
  absl::Time since = absl::InfinitePast();
  EXPECT_TRUE(policy.RetriesPaused(paused, 100, &since));
  EXPECT_NE(since, absl::InfinitePast());
  since -= policy.attempt_deadline();  // its first answer that long ago
  EXPECT_FALSE(policy.RetriesPaused(paused, 1, &since));
  EXPECT_FALSE(policy.RetriesPaused(absl::UnavailableError("x"), 100, &since));
  EXPECT_EQ(since, absl::InfinitePast());
  EXPECT_TRUE(policy.RetriesPaused(absl::UnavailableError("x"), 1, &since));
}

TEST(RetryPolicyTest, BackoffDoublesUpToTheCap) {
  RetryPolicy policy(Options(), Consistency(BSP, 0),
                     StepDeadlineRule::kEveryMode);
  EXPECT_EQ(policy.Backoff(1), absl::Milliseconds(50));
  EXPECT_EQ(policy.Backoff(2), absl::Milliseconds(100));
  EXPECT_EQ(policy.Backoff(3), absl::Milliseconds(200));
  EXPECT_EQ(policy.Backoff(4), absl::Milliseconds(300));
  EXPECT_EQ(policy.Backoff(100), absl::Milliseconds(300));
}

}  // namespace
}  // namespace ps
