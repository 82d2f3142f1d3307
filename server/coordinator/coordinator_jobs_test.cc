// JobCoordinator: options, submit, start order, cancel, listing, and
// registration on the shards.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/testing/coordinator_test_fixture.h"
#include "server/coordinator/testing/fake_shard_control.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(CoordinatorCreateTest, RejectsBadOptionsNamingTheField) {
  FakeShardControl shards;
  struct Case {
    std::function<void(JobCoordinator::Options&)> mutate;
    ShardControl* shards;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](JobCoordinator::Options&) {}, nullptr, "shards:"},
      {[](JobCoordinator::Options& o) { o.shard_addresses.clear(); }, &shards,
       "num_shards:"},
      {[](JobCoordinator::Options& o) { o.num_shards = 3; }, &shards,
       "shard_addresses:"},
      {[](JobCoordinator::Options& o) { o.heartbeat_interval_ms = 0; }, &shards,
       "heartbeat_interval_ms:"},
      {[](JobCoordinator::Options& o) { o.worker_timeout_ms = 1000; }, &shards,
       "worker_timeout_ms:"},
  };
  for (const Case& c : cases) {
    JobCoordinator::Options options;
    options.shard_addresses = {"a:1", "b:2"};
    c.mutate(options);
    auto coord = JobCoordinator::Create(options, c.shards);
    EXPECT_EQ(coord.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(coord.status().message(), HasSubstr(c.field));
  }
  JobCoordinator::Options options;
  options.num_shards = 2;  // addresses optional
  EXPECT_TRUE(JobCoordinator::Create(options, &shards).ok());
}

TEST_F(CoordinatorTest, SubmitStoresPendingJobWithNormalizedSpecAndPlacement) {
  SubmitJobRequest request;
  *request.mutable_spec() = Spec(2);
  SubmitJobResponse response;
  ASSERT_TRUE(coord_->SubmitJob(request, &response).ok());
  EXPECT_EQ(response.job_id(), "job-000001");
  EXPECT_THAT(response.problems(), IsEmpty());
  EXPECT_EQ(response.spec().tensors_size(), 2);
  EXPECT_EQ(response.spec().on_worker_failure(), FAIL);
  EXPECT_EQ(response.placement().num_shards(), 2u);
  EXPECT_EQ(response.placement().chunks_size(), 9);

  JobStatus job = Job("job-000001");
  EXPECT_EQ(job.state(), PENDING);
  EXPECT_EQ(job.name(), "softmax");
  EXPECT_EQ(job.reason(), "waiting for workers: needs 2, 0 idle");
  EXPECT_DOUBLE_EQ(job.submit_time_s(), 1700000000.0);
  EXPECT_FLOAT_EQ(job.progress().test_accuracy(), -1);
  EXPECT_EQ(job.placement().SerializeAsString(),
            response.placement().SerializeAsString());
  EXPECT_THAT(shards_.TakeCalls(), IsEmpty());
  EXPECT_EQ(Submit(Spec(1)), "job-000002");
}

TEST_F(CoordinatorTest, SubmitInvalidListsEveryProblem) {
  JobSpec spec = Spec(0);
  spec.clear_name();
  spec.mutable_optimizer()->set_learning_rate(-1);
  SubmitJobRequest request;
  *request.mutable_spec() = spec;
  SubmitJobResponse response;
  absl::Status status = coord_->SubmitJob(request, &response);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("3 problems"));
  EXPECT_THAT(response.problems(),
              ElementsAre("name: must be set",
                          "optimizer.learning_rate: must be finite and > 0, "
                          "got -1",
                          "num_workers: must be in [1, 1024], got 0"));
  EXPECT_TRUE(response.job_id().empty());
  ListJobsResponse list;
  ASSERT_TRUE(coord_->ListJobs(ListJobsRequest(), &list).ok());
  EXPECT_THAT(list.jobs(), IsEmpty());
}

TEST_F(CoordinatorTest, DryRunReturnsSpecAndPlacementWithoutStoring) {
  Register("host-a");
  SubmitJobRequest request;
  *request.mutable_spec() = Spec(1);
  request.set_dry_run(true);
  SubmitJobResponse response;
  ASSERT_TRUE(coord_->SubmitJob(request, &response).ok());
  EXPECT_TRUE(response.job_id().empty());
  EXPECT_EQ(response.spec().tensors_size(), 2);
  EXPECT_EQ(response.placement().chunks_size(), 9);
  ListJobsResponse list;
  ASSERT_TRUE(coord_->ListJobs(ListJobsRequest(), &list).ok());
  EXPECT_THAT(list.jobs(), IsEmpty());
  EXPECT_THAT(shards_.TakeCalls(), IsEmpty());  // the idle worker stays idle
  EXPECT_FALSE(Assigned("w-1").has_value());
}

TEST_F(CoordinatorTest, JobStartsWhenEnoughWorkersRegisterRanksInOrder) {
  const std::string job = Submit(Spec(2));
  const std::string a = Register("host-a");
  EXPECT_EQ(Job(job).state(), PENDING);
  EXPECT_EQ(Job(job).reason(), "waiting for workers: needs 2, 1 idle");
  EXPECT_THAT(shards_.TakeCalls(), IsEmpty());
  clock_.Advance(absl::Seconds(3));
  const std::string b = Register("host-b");
  EXPECT_EQ(a, "w-1");
  EXPECT_EQ(b, "w-2");
  EXPECT_THAT(shards_.TakeCalls(),
              ElementsAre("register 0 job-000001 workers=2 chunks=9",
                          "register 1 job-000001 workers=2 chunks=9"));
  JobStatus status = Job(job);
  EXPECT_EQ(status.state(), RUNNING);
  EXPECT_THAT(status.workers(), ElementsAre("host-a", "host-b"));
  EXPECT_DOUBLE_EQ(status.start_time_s(), 1700000003.0);

  for (auto [worker, rank] : {std::pair{a, 0u}, std::pair{b, 1u}}) {
    std::optional<Assignment> assignment = Assigned(worker);
    ASSERT_TRUE(assignment.has_value()) << worker;
    EXPECT_EQ(assignment->job_id(), job);
    EXPECT_EQ(assignment->rank(), rank);
    EXPECT_EQ(assignment->num_workers(), 2u);
    EXPECT_EQ(assignment->start_step(), 0u);
    EXPECT_EQ(assignment->spec().tensors_size(), 2);
    EXPECT_EQ(assignment->placement().chunks_size(), 9);
    EXPECT_THAT(assignment->shard_addresses(),
                ElementsAre("10.0.0.1:7000", "10.0.0.2:7000"));
  }
  // A third worker stays idle.
  EXPECT_FALSE(Assigned(Register("host-c")).has_value());
}

TEST_F(CoordinatorTest, JobsStartInSubmitOrder) {
  const std::string big = Submit(Spec(2));
  const std::string small = Submit(Spec(1));
  EXPECT_EQ(Job(small).reason(), "queued behind job-000001");
  Register("host-a");
  // One idle worker would fit the small job, but the big one goes first.
  EXPECT_EQ(Job(small).state(), PENDING);
  Register("host-b");
  EXPECT_EQ(Job(big).state(), RUNNING);
  EXPECT_EQ(Job(small).state(), PENDING);
  EXPECT_EQ(Job(small).reason(), "waiting for workers: needs 1, 0 idle");
  Register("host-c");
  EXPECT_EQ(Job(small).state(), RUNNING);
}

TEST_F(CoordinatorTest, CancelRunningJobAbortsWorkersAndDropsShards) {
  const std::string w = Register("host-a");
  const std::string job = Submit(Spec(1));
  ASSERT_EQ(Job(job).state(), RUNNING);
  shards_.TakeCalls();
  clock_.Advance(absl::Seconds(5));

  CancelJobRequest cancel;
  cancel.set_job_id(job);
  CancelJobResponse response;
  ASSERT_TRUE(coord_->CancelJob(cancel, &response).ok());
  EXPECT_EQ(response.state(), CANCELLED);
  JobStatus status = Job(job);
  EXPECT_EQ(status.state(), CANCELLED);
  EXPECT_EQ(status.reason(), "cancelled by user");
  EXPECT_DOUBLE_EQ(status.end_time_s(), 1700000005.0);
  EXPECT_THAT(shards_.TakeCalls(),
              ElementsAre("drop 0 job-000001", "drop 1 job-000001"));

  HeartbeatResponse beat = Beat(w);
  EXPECT_TRUE(beat.abort_job());
  EXPECT_EQ(beat.reason(), "job job-000001 CANCELLED: cancelled by user");
  ProgressReportResponse progress = Report(w, job, 0, 7);
  EXPECT_TRUE(progress.abort_job());
  EXPECT_THAT(progress.reason(), HasSubstr("CANCELLED"));
  // Asking for work means the worker stopped: no more aborts.
  EXPECT_FALSE(Assigned(w).has_value());
  EXPECT_FALSE(Beat(w).abort_job());

  // Cancelling again is fine; unknown jobs are not.
  EXPECT_TRUE(coord_->CancelJob(cancel, &response).ok());
  EXPECT_THAT(shards_.TakeCalls(), IsEmpty());
  cancel.set_job_id("job-424242");
  EXPECT_EQ(coord_->CancelJob(cancel, &response).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(CoordinatorTest, CancelPendingJobAndEndedJob) {
  const std::string job = Submit(Spec(3));
  CancelJobRequest cancel;
  cancel.set_job_id(job);
  CancelJobResponse response;
  ASSERT_TRUE(coord_->CancelJob(cancel, &response).ok());
  EXPECT_EQ(Job(job).state(), CANCELLED);
  // It no longer waits for workers.
  Register("a");
  Register("b");
  Register("c");
  EXPECT_EQ(Job(job).state(), CANCELLED);

  const std::string done = Submit(Spec(1));
  ASSERT_EQ(Job(done).state(), RUNNING);
  Report("w-1", done, 0, 100, /*finished=*/true);
  cancel.set_job_id(done);
  absl::Status status = coord_->CancelJob(cancel, &response);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("already ended SUCCEEDED"));
}

TEST_F(CoordinatorTest, RegistrationFailureFailsJobAndFreesWorkers) {
  shards_.FailRegisterOn(1);
  const std::string a = Register("host-a");
  const std::string job = Submit(Spec(1));
  JobStatus status = Job(job);
  EXPECT_EQ(status.state(), FAILED);
  EXPECT_EQ(status.reason(),
            "registering on the shards failed: shard 1 RegisterJob: memory "
            "budget exceeded");
  EXPECT_THAT(shards_.TakeCalls(),
              ElementsAre("register 0 job-000001 workers=1 chunks=9",
                          "register 1 job-000001 workers=1 chunks=9",
                          "drop 0 job-000001", "drop 1 job-000001"));
  EXPECT_FALSE(Assigned(a).has_value());

  shards_.FailRegisterOn(-1);
  const std::string next = Submit(Spec(1));
  EXPECT_EQ(Job(next).state(), RUNNING);
}

TEST_F(CoordinatorTest, CancelWhileRegisteringDropsAfterRegistration) {
  shards_.BlockRegister();
  const std::string a = Register("host-a");
  std::string job;
  std::thread submitter([&] { job = Submit(Spec(1)); });
  shards_.entered_.WaitForNotification();  // RegisterJob in flight
  JobStatus status = Job("job-000001");
  EXPECT_EQ(status.state(), PENDING);
  EXPECT_EQ(status.reason(), "registering on 2 shards");

  CancelJobRequest cancel;
  cancel.set_job_id("job-000001");
  CancelJobResponse response;
  ASSERT_TRUE(coord_->CancelJob(cancel, &response).ok());  // does not wait
  EXPECT_EQ(Job("job-000001").state(), CANCELLED);
  shards_.release_.Notify();
  submitter.join();

  EXPECT_EQ(job, "job-000001");
  EXPECT_EQ(Job(job).state(), CANCELLED);
  EXPECT_THAT(shards_.TakeCalls(),
              ElementsAre("register 0 job-000001 workers=1 chunks=9",
                          "register 1 job-000001 workers=1 chunks=9",
                          "drop 0 job-000001", "drop 1 job-000001"));
  EXPECT_FALSE(Assigned(a).has_value());
}

TEST_F(CoordinatorTest, ListJobsKeepsHistoryNewestLast) {
  Register("host-a");
  const std::string first = Submit(Spec(1));
  Report("w-1", first, 0, 5, /*finished=*/true);
  const std::string second = Submit(Spec(1));
  const std::string third = Submit(Spec(4));
  ListJobsResponse list;
  ASSERT_TRUE(coord_->ListJobs(ListJobsRequest(), &list).ok());
  ASSERT_EQ(list.jobs_size(), 3);
  EXPECT_EQ(list.jobs(0).job_id(), first);
  EXPECT_EQ(list.jobs(0).state(), SUCCEEDED);
  EXPECT_EQ(list.jobs(1).job_id(), second);
  EXPECT_EQ(list.jobs(1).state(), RUNNING);
  EXPECT_EQ(list.jobs(2).job_id(), third);
  EXPECT_EQ(list.jobs(2).state(), PENDING);

  GetJobRequest get;
  get.set_job_id("job-000404");
  JobStatus status;
  EXPECT_EQ(coord_->GetJob(get, &status).code(), absl::StatusCode::kNotFound);
}

TEST_F(CoordinatorTest, HistoryHoldsTheLeadersReportsInStepOrder) {
  const std::string w1 = Register("host-a");
  const std::string w2 = Register("host-b");
  const std::string job = Submit(Spec(2));
  Report(w1, job, 0, 10);
  Report(w2, job, 1, 15);  // not the leader: no point
  Report(w1, job, 0, 20);
  GetHistoryRequest request;
  request.set_job_id(job);
  GetHistoryResponse history;
  ASSERT_TRUE(coord_->GetHistory(request, &history).ok());
  EXPECT_EQ(history.job_id(), job);
  ASSERT_EQ(history.points_size(), 2);
  EXPECT_EQ(history.points(0).step(), 10u);
  EXPECT_EQ(history.points(1).step(), 20u);
  EXPECT_FLOAT_EQ(history.points(1).loss(), 1.0f / 21);
}

TEST_F(CoordinatorTest, HistoryOfAnUnknownJobIsNotFound) {
  GetHistoryRequest request;
  request.set_job_id("job-999999");
  GetHistoryResponse history;
  absl::Status s = coord_->GetHistory(request, &history);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("job-999999"), std::string::npos) << s;
}

}  // namespace
}  // namespace ps
