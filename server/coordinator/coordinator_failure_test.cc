// JobCoordinator: lost workers under FAIL and SHRINK, rejoin, membership
// changes and the job's rate after a SHRINK.
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/testing/coordinator_test_fixture.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST_F(CoordinatorTest, LostWorkerFailsJobNamingIt) {
  const std::string a = Register("host-a");
  const std::string b = Register("host-b");
  const std::string job = Submit(Spec(2, FAIL));
  ASSERT_EQ(Job(job).state(), RUNNING);
  clock_.Advance(absl::Seconds(6));
  Beat(a);
  ASSERT_TRUE(Assigned(b).has_value());  // any call counts as alive
  clock_.Advance(absl::Seconds(6));
  coord_->Tick(clock_.Now());  // a: 6 s silent, b: 6 s silent
  EXPECT_EQ(Job(job).state(), RUNNING);

  clock_.Advance(absl::Seconds(4));
  Beat(a);
  coord_->Tick(clock_.Now());  // b: 10 s silent
  JobStatus status = Job(job);
  EXPECT_EQ(status.state(), FAILED);
  EXPECT_EQ(status.reason(),
            "worker w-2 (rank 1, host-b) lost: no heartbeat for 10.0 s");
  EXPECT_DOUBLE_EQ(status.end_time_s(), 1700000016.0);

  HeartbeatResponse beat = Beat(a);
  EXPECT_TRUE(beat.abort_job());
  EXPECT_THAT(beat.reason(), HasSubstr("FAILED: worker w-2"));
  EXPECT_TRUE(Beat(b).reregister());
  // Failure drops the job on every shard, which releases the surviving
  // workers' waits at once.
  EXPECT_THAT(shards_.TakeCalls(),
              ElementsAre("register 0 job-000001 workers=2 chunks=9",
                          "register 1 job-000001 workers=2 chunks=9",
                          "drop 0 job-000001", "drop 1 job-000001"));
}

TEST_F(CoordinatorTest, RestartedWorkerFailsItsJobUnderFail) {
  Register("host-a");
  const std::string job = Submit(Spec(1));
  ASSERT_EQ(Job(job).state(), RUNNING);
  const std::string again = Register("host-a");
  EXPECT_EQ(again, "w-2");
  EXPECT_EQ(Job(job).state(), FAILED);
  EXPECT_EQ(Job(job).reason(),
            "worker w-1 (rank 0, host-a) lost: registered again (restarted)");
  EXPECT_TRUE(Beat("w-1").reregister());
  EXPECT_FALSE(Assigned(again).has_value());
}

TEST_F(CoordinatorTest, ShrinkSetsMembershipAndContinues) {
  const std::string a = Register("host-a");
  const std::string b = Register("host-b");
  const std::string c = Register("host-c");
  const std::string job = Submit(Spec(3, SHRINK));
  ASSERT_EQ(Job(job).state(), RUNNING);
  shards_.TakeCalls();

  clock_.Advance(absl::Seconds(10));
  // Rank 0 leads (and evaluates); the others are told they do not.
  EXPECT_EQ(Beat(a).leads_job(), job);
  EXPECT_EQ(Beat(c).leads_job(), "");
  coord_->Tick(clock_.Now());
  EXPECT_THAT(shards_.TakeCalls(),
              ElementsAre("membership 0 job-000001 [0,2]",
                          "membership 1 job-000001 [0,2]"));
  JobStatus status = Job(job);
  EXPECT_EQ(status.state(), RUNNING);
  EXPECT_EQ(status.reason(),
            "shrunk: worker w-2 (rank 1, host-b) lost: no heartbeat for "
            "10.0 s");
  EXPECT_FALSE(Report(a, job, 0, 20).abort_job());
  EXPECT_FALSE(Report(c, job, 2, 20).abort_job());
  EXPECT_EQ(Job(job).progress().step(), 20u);

  // Rank 0 lost: rank 2 leads; its progress becomes the job's, and its
  // heartbeats say so (it evaluates from now on).
  clock_.Advance(absl::Seconds(10));
  EXPECT_EQ(Beat(c).leads_job(), "");
  coord_->Tick(clock_.Now());
  EXPECT_THAT(shards_.TakeCalls(), ElementsAre("membership 0 job-000001 [2]",
                                               "membership 1 job-000001 [2]"));
  EXPECT_EQ(Beat(c).leads_job(), job);
  Report(c, job, 2, 31);
  EXPECT_EQ(Job(job).progress().step(), 31u);

  clock_.Advance(absl::Seconds(10));
  coord_->Tick(clock_.Now());
  status = Job(job);
  EXPECT_EQ(status.state(), FAILED);
  EXPECT_EQ(status.reason(),
            "every worker lost; last: worker w-3 (rank 2, host-c) lost: no "
            "heartbeat for 10.0 s");
}

TEST_F(CoordinatorTest, ShrinkSucceedsWhenTheNewLeaderHadFinished) {
  const std::string a = Register("host-a");
  const std::string b = Register("host-b");
  const std::string job = Submit(Spec(2, SHRINK));
  Report(a, job, 0, 99);
  Report(b, job, 1, 100, /*finished=*/true);
  EXPECT_EQ(Job(job).state(), RUNNING);
  clock_.Advance(absl::Seconds(10));
  Beat(b);
  coord_->Tick(clock_.Now());  // rank 0 lost before its final report
  EXPECT_EQ(Job(job).state(), SUCCEEDED);
  EXPECT_EQ(Job(job).reason(), "finished at step 99");
}

TEST_F(CoordinatorTest, LostIdleWorkersNoLongerCount) {
  const std::string a = Register("host-a");
  clock_.Advance(absl::Seconds(10));
  coord_->Tick(clock_.Now());
  EXPECT_TRUE(Beat(a).reregister());
  const std::string job = Submit(Spec(1));
  EXPECT_EQ(Job(job).state(), PENDING);
  EXPECT_EQ(Job(job).reason(), "waiting for workers: needs 1, 0 idle");
  Register("host-a");
  EXPECT_EQ(Job(job).state(), RUNNING);
}

TEST_F(CoordinatorTest, MembershipFailureFailsTheJob) {
  Register("host-a");
  const std::string b = Register("host-b");
  const std::string job = Submit(Spec(2, SHRINK));
  shards_.FailMembership();
  clock_.Advance(absl::Seconds(10));
  Beat(b);
  coord_->Tick(clock_.Now());
  EXPECT_EQ(Job(job).state(), FAILED);
  EXPECT_THAT(Job(job).reason(),
              HasSubstr("changing the quorum failed: shard 0 SetMembership: "
                        "shard down"));
}

TEST_F(CoordinatorTest, LostWorkerRejoinsAtTheCurrentStep) {
  const std::string a = Register("host-a");
  const std::string b = Register("host-b");
  const std::string job = Submit(Spec(2, SHRINK));
  ASSERT_EQ(Job(job).state(), RUNNING);
  clock_.Advance(absl::Seconds(10));
  Beat(a);
  coord_->Tick(clock_.Now());  // b lost
  Report(a, job, 0, 42);
  shards_.TakeCalls();

  const std::string b2 = Register("host-b");
  EXPECT_EQ(b2, "w-3");
  std::optional<Assignment> assignment = Assigned(b2);
  ASSERT_TRUE(assignment.has_value());
  EXPECT_EQ(assignment->job_id(), job);
  EXPECT_EQ(assignment->rank(), 1u);
  EXPECT_EQ(assignment->start_step(), 42u);
  EXPECT_THAT(shards_.TakeCalls(),
              ElementsAre("membership 0 job-000001 [0,1]",
                          "membership 1 job-000001 [0,1]"));
  EXPECT_EQ(Job(job).reason(),
            "worker w-3 (rank 1, host-b) rejoined at step 42");
  // The old id no longer holds the rank; the new one does.
  EXPECT_TRUE(Report(b, job, 1, 43).abort_job());
  EXPECT_FALSE(Report(b2, job, 1, 43).abort_job());
}

TEST_F(CoordinatorTest, SamplesPerSecondCountsOnlyLiveWorkersAfterShrink) {
  const std::string a = Register("host-a");
  const std::string b = Register("host-b");
  const std::string job = Submit(Spec(2, SHRINK));
  ASSERT_EQ(Job(job).state(), RUNNING);
  // Each trainer reports the job's rate at its own pace: 2 x 100 samples/s.
  ReportRate(a, job, 0, 10, 200);
  ReportRate(b, job, 1, 10, 300);  // not the leader
  EXPECT_FLOAT_EQ(Job(job).progress().samples_per_s(), 200);

  clock_.Advance(absl::Seconds(10));
  Beat(a);
  coord_->Tick(clock_.Now());  // b lost: only the survivor's samples count
  ASSERT_EQ(Job(job).state(), RUNNING);
  EXPECT_FLOAT_EQ(Job(job).progress().samples_per_s(), 100);
  // The survivor's trainer still multiplies by the spec's 2 workers.
  ReportRate(a, job, 0, 20, 220);
  EXPECT_FLOAT_EQ(Job(job).progress().samples_per_s(), 110);

  Register("host-b");  // rejoins: two live workers again
  EXPECT_FLOAT_EQ(Job(job).progress().samples_per_s(), 220);
}

}  // namespace
}  // namespace ps
