// JobCoordinator: psctl scale (ScaleJob) growing a job past its submitted
// workers and back, and every refusal leaving the job unchanged.
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

JobSpec Elastic(uint32_t workers, uint32_t max_workers,
                WorkerFailurePolicy policy = SHRINK) {
  JobSpec spec = Spec(workers, policy);
  spec.set_max_workers(max_workers);
  return spec;
}

class ScaleTest : public CoordinatorTest {
 protected:
  absl::Status Scale(const std::string& job, uint32_t workers,
                     ScaleJobResponse* response = nullptr) {
    ScaleJobRequest request;
    request.set_job_id(job);
    request.set_workers(workers);
    ScaleJobResponse ignored;
    return coord_->ScaleJob(request, response ? response : &ignored);
  }
  void Leave(const std::string& worker, uint64_t next_step) {
    UnregisterRequest request;
    request.set_worker_id(worker);
    request.set_next_step(next_step);
    request.set_reason("scaled down");
    UnregisterResponse response;
    ASSERT_TRUE(coord_->Unregister(request, &response).ok());
    EXPECT_TRUE(response.known());
  }
};

TEST_F(ScaleTest, GrowsPastTheSubmittedWorkersAndBack) {
  const std::string a = Register("host-a");
  const std::string b = Register("host-b");
  const std::string job = Submit(Elastic(2, 4));
  ASSERT_EQ(Job(job).state(), RUNNING);
  // The shards hold 4 rank slots; the 2 unfilled ones are out of the quorum.
  EXPECT_THAT(shards_.TakeCalls(),
              ElementsAre("register 0 job-000001 workers=4 chunks=9",
                          "register 1 job-000001 workers=4 chunks=9",
                          "membership 0 job-000001 [0,1]",
                          "membership 1 job-000001 [0,1]"));
  std::optional<Assignment> assigned = Assigned(a);
  ASSERT_TRUE(assigned.has_value());
  EXPECT_EQ(assigned->num_workers(), 4u);
  Report(a, job, 0, 30);

  ScaleJobResponse scaled;
  ASSERT_TRUE(Scale(job, 4, &scaled).ok());
  EXPECT_EQ(scaled.scale().target_workers(), 4u);
  EXPECT_EQ(scaled.scale().from_workers(), 2u);
  EXPECT_EQ(scaled.scale().active_workers(), 2u);
  EXPECT_EQ(scaled.scale().reached_s(), 0);  // nobody idle yet
  EXPECT_TRUE(shards_.TakeCalls().empty());

  // Workers that register take the free slots at the job's step.
  const std::string c = Register("host-c");
  assigned = Assigned(c);
  ASSERT_TRUE(assigned.has_value());
  EXPECT_EQ(assigned->rank(), 2u);
  EXPECT_EQ(assigned->start_step(), 30u);
  EXPECT_THAT(shards_.TakeCalls(),
              ElementsAre("membership 0 job-000001 [0,1,2]",
                          "membership 1 job-000001 [0,1,2]"));
  clock_.Advance(absl::Seconds(2));
  const std::string d = Register("host-d");
  ASSERT_EQ(Assigned(d)->rank(), 3u);
  shards_.TakeCalls();
  JobStatus status = Job(job);
  EXPECT_EQ(status.scale().active_workers(), 4u);
  EXPECT_EQ(status.scale().reached_s() - status.scale().requested_s(), 2.0);
  EXPECT_THAT(status.workers(),
              ElementsAre("host-a", "host-b", "host-c", "host-d"));
  EXPECT_THAT(status.reason(), HasSubstr("joined at step 30 (scale to 4)"));

  // Down to 2: the highest ranks are told to leave, and leave.
  ASSERT_TRUE(Scale(job, 2).ok());
  EXPECT_EQ(Beat(a).leave_job(), "");
  EXPECT_EQ(Beat(b).leave_job(), "");
  EXPECT_EQ(Beat(c).leave_job(), job);
  EXPECT_EQ(Beat(d).leave_job(), job);
  Leave(d, 61);
  Leave(c, 61);
  EXPECT_THAT(shards_.TakeCalls(),
              ElementsAre("membership 0 job-000001 [0,1,2]",
                          "membership 1 job-000001 [0,1,2]",
                          "membership 0 job-000001 [0,1]",
                          "membership 1 job-000001 [0,1]"));
  status = Job(job);
  EXPECT_EQ(status.state(), RUNNING);
  EXPECT_EQ(status.scale().active_workers(), 2u);
  EXPECT_GT(status.scale().reached_s(), 0);
  // Back, idle, host-c takes no rank (the scale is done, its old rank is
  // not kept for it).
  const std::string c2 = Register("host-c");
  EXPECT_FALSE(Assigned(c2).has_value());
  // The job succeeds once both ranks left in it finished.
  Report(a, job, 0, 100, /*finished=*/true);
  status = Job(job);
  EXPECT_EQ(status.state(), RUNNING);
  EXPECT_THAT(status.reason(), HasSubstr("waiting for ranks [1] to finish"));
  Report(b, job, 1, 100, /*finished=*/true);
  EXPECT_EQ(Job(job).state(), SUCCEEDED);
}

TEST_F(ScaleTest, RefusalsNameWhyAndChangeNothing) {
  const std::string a = Register("host-a");
  const std::string job = Submit(Elastic(1, 3));
  shards_.TakeCalls();
  const JobStatus before = Job(job);

  absl::Status s = Scale("job-000099", 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  s = Scale(job, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("workers: must be >= 1"));
  s = Scale(job, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("past job job-000001's max_workers 3"));
  EXPECT_EQ(Job(job).DebugString(), before.DebugString());

  // In progress (no idle worker): a second scale waits, except to the
  // active count, which ends it there.
  ASSERT_TRUE(Scale(job, 3).ok());
  s = Scale(job, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("still scaling to 3 workers (1 active)"));
  EXPECT_EQ(Job(job).scale().target_workers(), 3u);
  ASSERT_TRUE(Scale(job, 1).ok());
  EXPECT_GT(Job(job).scale().reached_s(), 0);
  EXPECT_TRUE(shards_.TakeCalls().empty());

  Report(a, job, 0, 10, /*finished=*/true);
  s = Scale(job, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("is SUCCEEDED; only a running job"));
}

TEST_F(ScaleTest, NeedsShrinkAndAGrowableSpec) {
  Register("host-a");
  const std::string job = Submit(Elastic(1, 2, FAIL));
  absl::Status s = Scale(job, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("on_worker_failure"));

  SubmitJobRequest request;
  *request.mutable_spec() = Elastic(2, 1);
  SubmitJobResponse response;
  EXPECT_EQ(coord_->SubmitJob(request, &response).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_EQ(response.problems_size(), 1);
  EXPECT_THAT(response.problems(0), HasSubstr("max_workers: must be 0 or in "
                                              "[num_workers 2, 1024], got 1"));
}

}  // namespace
}  // namespace ps
