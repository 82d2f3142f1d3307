// Shard tests. Waits that do not complete: step deadlines, dropped jobs,
// shutdown and destruction.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace shard_test {
namespace {

using ::testing::HasSubstr;

TEST(ShardBspTest, DeadlineNamesTheMissingWorkers) {
  Shard shard(ShardOptions{});
  const RegisterJobRequest reg = Registration("j", Spec(BSP, 3));
  RegisterJobResponse resp;
  ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
  std::vector<std::unique_ptr<PushPullCall>> step0;
  for (uint32_t w : {0, 1, 2})
    step0.push_back(StartPushPull(shard, reg, w, 0, 0));
  ASSERT_TRUE(step0[0]->status.ok());
  // Step 1: only worker 0 pushes.
  auto call = StartPushPull(shard, reg, 0, 1, 1);
  shard.CheckDeadlines(absl::Now());
  EXPECT_FALSE(call->done.HasBeenNotified());
  shard.CheckDeadlines(absl::Now() + absl::Seconds(61));
  ASSERT_TRUE(call->done.HasBeenNotified());
  EXPECT_EQ(call->status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(call->status.message(),
            "job j step 1: no gradient from workers 1, 2 after 60000 ms");
  EXPECT_EQ(shard.PendingWaits(), 0u);

  // The configured deadline is honoured.
  JobSpec quick = Spec(BSP, 2);
  quick.mutable_consistency()->set_step_deadline_ms(500);
  const RegisterJobRequest reg2 = Registration("quick", quick);
  ASSERT_TRUE(shard.RegisterJob(reg2, &resp).ok());
  auto q = StartPushPull(shard, reg2, 1, 0, 0);
  shard.CheckDeadlines(absl::Now() + absl::Seconds(1));
  ASSERT_TRUE(q->done.HasBeenNotified());
  EXPECT_EQ(q->status.message(),
            "job quick step 0: no gradient from worker 0 after 500 ms");
}

TEST(ShardBspTest, DropAndShutdownFailPendingWaits) {
  Shard shard(ShardOptions{});
  RegisterJobResponse resp;
  const RegisterJobRequest a = Registration("a", Spec(BSP, 2));
  const RegisterJobRequest b = Registration("b", Spec(BSP, 2));
  ASSERT_TRUE(shard.RegisterJob(a, &resp).ok());
  ASSERT_TRUE(shard.RegisterJob(b, &resp).ok());
  auto wa = StartPushPull(shard, a, 0, 0, 0);
  auto wb = StartPushPull(shard, b, 0, 0, 0);
  EXPECT_EQ(shard.PendingWaits(), 2u);
  DropJobRequest drop;
  drop.set_job_id("a");
  ASSERT_TRUE(shard.DropJob(drop).ok());
  ASSERT_TRUE(wa->done.HasBeenNotified());
  EXPECT_EQ(wa->status.code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(shard.DropJob(drop).ok()) << "a retried drop succeeds";
  auto gone = StartPushPull(shard, a, 1, 0, 0);
  EXPECT_EQ(gone->status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(gone->status.message()),
              HasSubstr("job_id: no job \"a\" on shard 0"));

  EXPECT_FALSE(wb->done.HasBeenNotified());
  shard.Shutdown();
  ASSERT_TRUE(wb->done.HasBeenNotified());
  EXPECT_EQ(wb->status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(shard.PendingWaits(), 0u);
  auto after = StartPushPull(shard, b, 1, 0, 0);
  EXPECT_EQ(after->status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(shard.RegisterJob(a, &resp).code(), absl::StatusCode::kUnavailable);
}

TEST(ShardBspTest, DestructionFailsPendingWaits) {
  std::unique_ptr<PushPullCall> call;
  {
    Shard shard(ShardOptions{});
    const RegisterJobRequest reg = Registration("j", Spec(BSP, 2));
    RegisterJobResponse resp;
    ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
    call = StartPushPull(shard, reg, 0, 0, 0);
    EXPECT_FALSE(call->done.HasBeenNotified());
  }
  ASSERT_TRUE(call->done.HasBeenNotified());
  EXPECT_EQ(call->status.code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace shard_test
}  // namespace ps
