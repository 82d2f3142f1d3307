#include "server/coordinator/shard_op_queue.h"

#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/testing/fake_shard_control.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

RegisterJobRequest Request(const std::string& job_id) {
  RegisterJobRequest request;
  request.set_job_id(job_id);
  request.set_num_workers(2);
  return request;
}

TEST(ShardOpQueueTest, NothingRunsUntilDrainThenInOrder) {
  FakeShardControl shards;
  ShardOpQueue ops(&shards, 2);
  SetMembershipRequest membership;
  membership.set_job_id("job-1");
  membership.add_active_workers(0);
  ops.EnqueueMembership(membership, [](absl::Status) { FAIL(); });
  ops.EnqueueDrop("job-2", 1);
  EXPECT_THAT(shards.TakeCalls(), IsEmpty());
  ops.Drain();
  EXPECT_THAT(shards.TakeCalls(),
              ElementsAre("membership 0 job-1 [0]", "membership 1 job-1 [0]",
                          "drop 0 job-2"));
  ops.Drain();  // empty: nothing again
  EXPECT_THAT(shards.TakeCalls(), IsEmpty());
}

TEST(ShardOpQueueTest, RegisterStopsAtTheFirstFailureNamingTheShard) {
  FakeShardControl shards;
  shards.FailRegisterOn(1);
  ShardOpQueue ops(&shards, 3);
  std::optional<absl::Status> failure;
  uint32_t asked = 0;
  ops.EnqueueRegister([] { return Request("job-1"); },
                      [&](absl::Status s, uint32_t n) {
                        failure = std::move(s);
                        asked = n;
                      });
  ops.Drain();
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(failure->message(), "shard 1 RegisterJob: memory budget exceeded");
  EXPECT_EQ(asked, 2u);
  EXPECT_THAT(shards.TakeCalls(),
              ElementsAre("register 0 job-1 workers=2 chunks=0",
                          "register 1 job-1 workers=2 chunks=0"));
}

TEST(ShardOpQueueTest, RegisterSkippedWhenPrepareDeclines) {
  FakeShardControl shards;
  ShardOpQueue ops(&shards, 2);
  bool done = false;
  ops.EnqueueRegister([] { return std::optional<RegisterJobRequest>(); },
                      [&](absl::Status, uint32_t) { done = true; });
  ops.Drain();
  EXPECT_FALSE(done);
  EXPECT_THAT(shards.TakeCalls(), IsEmpty());
}

TEST(ShardOpQueueTest, MembershipFailureReachesTheCallbackOnce) {
  FakeShardControl shards;
  shards.FailMembership();
  ShardOpQueue ops(&shards, 2);
  std::vector<absl::Status> failures;
  SetMembershipRequest request;
  request.set_job_id("job-1");
  ops.EnqueueMembership(request,
                        [&](absl::Status s) { failures.push_back(s); });
  ops.Drain();
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].message(), "shard 0 SetMembership: shard down");
  EXPECT_THAT(shards.TakeCalls(), ElementsAre("membership 0 job-1 []"));
}

TEST(ShardOpQueueTest, CallbacksMayEnqueueAndTheSameDrainRunsIt) {
  FakeShardControl shards;
  ShardOpQueue ops(&shards, 2);
  ops.EnqueueRegister([] { return Request("job-1"); },
                      [&](absl::Status s, uint32_t asked) {
                        EXPECT_TRUE(s.ok()) << s;
                        ops.EnqueueDrop("job-1", asked);
                      });
  ops.Drain();
  EXPECT_THAT(shards.TakeCalls(),
              ElementsAre("register 0 job-1 workers=2 chunks=0",
                          "register 1 job-1 workers=2 chunks=0", "drop 0 job-1",
                          "drop 1 job-1"));
}

TEST(ShardOpQueueTest, ASecondDrainerLeavesTheWorkToTheFirst) {
  FakeShardControl shards;
  shards.BlockRegister();
  ShardOpQueue ops(&shards, 1);
  ops.EnqueueRegister([] { return Request("job-1"); },
                      [](absl::Status, uint32_t) {});
  std::thread first([&] { ops.Drain(); });
  shards.entered_.WaitForNotification();  // the first drainer is blocked
  ops.EnqueueDrop("job-1", 1);
  ops.Drain();  // returns at once: the first drainer runs the drop
  EXPECT_THAT(shards.TakeCalls(),
              ElementsAre("register 0 job-1 workers=2 chunks=0"));
  shards.release_.Notify();
  first.join();
  EXPECT_THAT(shards.TakeCalls(), ElementsAre("drop 0 job-1"));
}

}  // namespace
}  // namespace ps
