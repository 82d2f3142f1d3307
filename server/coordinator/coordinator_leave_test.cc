// JobCoordinator: workers that leave at once (Unregister) under SHRINK and
// FAIL, after finishing, and while idle.
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

UnregisterResponse Leave(JobCoordinator& coord, const std::string& worker,
                         uint64_t next_step, const std::string& reason) {
  UnregisterRequest request;
  request.set_worker_id(worker);
  request.set_next_step(next_step);
  request.set_reason(reason);
  UnregisterResponse response;
  EXPECT_TRUE(coord.Unregister(request, &response).ok());
  return response;
}

TEST_F(CoordinatorTest, LeavingShrinksTheQuorumAtOnce) {
  const std::string a = Register("host-a");
  const std::string b = Register("host-b");
  const std::string c = Register("host-c");
  const std::string job = Submit(Spec(3, SHRINK));
  ASSERT_EQ(Job(job).state(), RUNNING);
  Report(a, job, 0, 40);
  shards_.TakeCalls();

  // No clock advance, no Tick: the rank leaves with the call.
  EXPECT_TRUE(Leave(*coord_, b, 42, "SIGTERM").known());
  EXPECT_THAT(shards_.TakeCalls(),
              ElementsAre("membership 0 job-000001 [0,2]",
                          "membership 1 job-000001 [0,2]"));
  const JobStatus status = Job(job);
  EXPECT_EQ(status.state(), RUNNING);
  EXPECT_EQ(status.reason(),
            "shrunk: worker w-2 (rank 1, host-b) left: after step 41 (the "
            "last counted), SIGTERM");
  // Forgotten: a second call changes nothing, its heartbeat re-registers.
  EXPECT_FALSE(Leave(*coord_, b, 42, "SIGTERM").known());
  EXPECT_TRUE(shards_.TakeCalls().empty());
  EXPECT_TRUE(Beat(b).reregister());
  EXPECT_FALSE(Report(c, job, 2, 45).abort_job());
}

TEST_F(CoordinatorTest, LeavingAFailJobFailsItNamingTheWorker) {
  const std::string a = Register("host-a");
  const std::string b = Register("host-b");
  const std::string job = Submit(Spec(2, FAIL));
  ASSERT_EQ(Job(job).state(), RUNNING);
  EXPECT_TRUE(Leave(*coord_, a, 0, "close()").known());
  const JobStatus status = Job(job);
  EXPECT_EQ(status.state(), FAILED);
  EXPECT_THAT(status.reason(), HasSubstr("worker w-1 (rank 0, host-a) left: "
                                         "before its first step, close()"));
  EXPECT_TRUE(Beat(b).abort_job());
}

TEST_F(CoordinatorTest, LeavingAfterFinishingChangesNothing) {
  const std::string a = Register("host-a");
  const std::string b = Register("host-b");
  const std::string job = Submit(Spec(2, FAIL));
  Report(b, job, 1, 100, /*finished=*/true);
  shards_.TakeCalls();
  EXPECT_TRUE(Leave(*coord_, b, 100, "close()").known());
  EXPECT_TRUE(shards_.TakeCalls().empty());
  EXPECT_EQ(Job(job).state(), RUNNING);
  Report(a, job, 0, 100, /*finished=*/true);
  EXPECT_EQ(Job(job).state(), SUCCEEDED);
}

TEST_F(CoordinatorTest, AnIdleWorkerThatLeftTakesNoJob) {
  const std::string a = Register("host-a");
  EXPECT_TRUE(Leave(*coord_, a, 0, "SIGTERM").known());
  const std::string job = Submit(Spec(1));
  EXPECT_EQ(Job(job).state(), PENDING);
  EXPECT_FALSE(Leave(*coord_, "w-77", 0, "").known());
}

}  // namespace
}  // namespace ps
