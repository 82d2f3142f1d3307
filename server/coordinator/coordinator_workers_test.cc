// JobCoordinator: workers' long-polls, heartbeats and progress reports, and
// shutdown.
#include <limits>
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

namespace ps {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// GetShardAddresses for a job (the workers' relocator): an unknown job is
// refused naming job_id, the addresses left alone; a known job's are the
// shards' own while nothing failed over.
TEST_F(CoordinatorTest, AJobsShardAddressesNeedAKnownJob) {
  const std::string job = Submit(Spec(1));
  std::vector<std::string> addresses = {"10.0.0.1:7000", "10.0.0.2:7000"};
  const absl::Status st =
      coord_->RedirectFailedShards("job-000099", &addresses);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(st.message(), HasSubstr("job_id"));
  EXPECT_TRUE(coord_->RedirectFailedShards(job, &addresses).ok());
  EXPECT_THAT(addresses,
              ::testing::ElementsAre("10.0.0.1:7000", "10.0.0.2:7000"));
}

TEST_F(CoordinatorTest, LongPollCompletesWhenAnAssignmentAppears) {
  const std::string w = Register("host-a");
  std::unique_ptr<Poll> poll = StartPoll(w, 30000);
  EXPECT_FALSE(poll->status.has_value());  // parked, caller not blocked

  // `done` runs outside the lock: calling back in must not deadlock.
  std::optional<HeartbeatResponse> from_callback;
  auto poll2 = std::make_unique<Poll>();
  GetAssignmentRequest request;
  request.set_worker_id(w);
  request.set_wait_ms(30000);
  coord_->GetAssignment(request, &poll2->response, [&](absl::Status s) {
    poll2->status = s;
    from_callback = Beat(w);
  });
  // The second poll from the same worker supersedes the first.
  ASSERT_TRUE(poll->status.has_value());
  EXPECT_TRUE(poll->status->ok());
  EXPECT_FALSE(poll->response.has_assignment());
  EXPECT_FALSE(poll2->status.has_value());

  const std::string job = Submit(Spec(1));
  ASSERT_TRUE(poll2->status.has_value());
  EXPECT_TRUE(poll2->status->ok());
  ASSERT_TRUE(poll2->response.has_assignment());
  EXPECT_EQ(poll2->response.assignment().job_id(), job);
  EXPECT_TRUE(from_callback.has_value());
}

TEST_F(CoordinatorTest, LongPollExpiresOnTick) {
  const std::string w = Register("host-a");
  std::unique_ptr<Poll> poll = StartPoll(w, 2000);
  clock_.Advance(absl::Milliseconds(1999));
  coord_->Tick(clock_.Now());
  EXPECT_FALSE(poll->status.has_value());
  clock_.Advance(absl::Milliseconds(1));
  coord_->Tick(clock_.Now());
  ASSERT_TRUE(poll->status.has_value());
  EXPECT_TRUE(poll->status->ok());
  EXPECT_FALSE(poll->response.has_assignment());
}

// A registration that starts a job answers once the job's RegisterJob
// reached every shard (seconds for a big model): meanwhile the worker has
// no id to heartbeat with, and must not be lost. Before, a job slower to
// register than the heartbeat timeout failed with "no heartbeat".
TEST_F(CoordinatorTest, AWorkerIsNotLostWhileItsRegistrationStartsAJob) {
  const std::string job = Submit(Spec(1));
  shards_.BlockRegister();
  std::string w;
  std::thread registering([&] { w = Register("host-a"); });
  shards_.entered_.WaitForNotification();  // RegisterJob in flight
  clock_.Advance(absl::Seconds(30));       // 3x the heartbeat timeout
  coord_->Tick(clock_.Now());
  EXPECT_NE(Job(job).state(), FAILED) << Job(job).reason();
  shards_.release_.Notify();
  registering.join();
  EXPECT_EQ(Job(job).state(), RUNNING) << Job(job).reason();
  // Its heartbeats are due from the answer on, not from the registration.
  clock_.Advance(absl::Seconds(9));
  coord_->Tick(clock_.Now());
  EXPECT_FALSE(Beat(w).reregister());
  EXPECT_EQ(Job(job).state(), RUNNING) << Job(job).reason();
}

TEST_F(CoordinatorTest, UnknownWorkersAreToldToRegister) {
  std::unique_ptr<Poll> poll = StartPoll("w-99", 1000);
  ASSERT_TRUE(poll->status.has_value());
  EXPECT_EQ(poll->status->code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(poll->status->message(), HasSubstr("worker_id"));
  EXPECT_TRUE(Beat("w-99").reregister());

  RegisterWorkerRequest nameless;
  RegisterWorkerResponse response;
  EXPECT_EQ(coord_->RegisterWorker(nameless, &response).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorTest, ShutdownCompletesParkedPolls) {
  const std::string w = Register("host-a");
  std::unique_ptr<Poll> poll = StartPoll(w, 60000);
  EXPECT_FALSE(poll->status.has_value());
  coord_->Shutdown();
  ASSERT_TRUE(poll->status.has_value());
  EXPECT_EQ(poll->status->code(), absl::StatusCode::kUnavailable);
  std::unique_ptr<Poll> late = StartPoll(w, 60000);
  ASSERT_TRUE(late->status.has_value());
  EXPECT_EQ(late->status->code(), absl::StatusCode::kUnavailable);
  SubmitJobRequest request;
  *request.mutable_spec() = Spec(1);
  SubmitJobResponse response;
  EXPECT_EQ(coord_->SubmitJob(request, &response).code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(CoordinatorTest, ProgressFromRankZeroAndFinishSucceeds) {
  const std::string a = Register("host-a");
  const std::string b = Register("host-b");
  const std::string job = Submit(Spec(2));
  const std::string next = Submit(Spec(2));
  Report(a, job, 0, 10);
  Report(b, job, 1, 11);  // not the leader: ignored for the job's progress
  JobStatus status = Job(job);
  EXPECT_EQ(status.progress().step(), 10u);
  EXPECT_FLOAT_EQ(status.progress().loss(), 1.0f / 11);

  clock_.Advance(absl::Seconds(60));
  EXPECT_FALSE(Report(b, job, 1, 100, /*finished=*/true).abort_job());
  EXPECT_EQ(Job(job).state(), RUNNING);
  EXPECT_FALSE(Report(a, job, 0, 100, /*finished=*/true).abort_job());
  status = Job(job);
  EXPECT_EQ(status.state(), SUCCEEDED);
  EXPECT_EQ(status.reason(), "finished at step 100, test accuracy 0.8400");
  EXPECT_FLOAT_EQ(status.progress().test_accuracy(), 0.84f);
  EXPECT_DOUBLE_EQ(status.end_time_s(), 1700000060.0);
  EXPECT_FALSE(Beat(a).abort_job());
  // Late reports are told to stop; the shards keep the parameters.
  EXPECT_TRUE(Report(b, job, 1, 100).abort_job());
  std::vector<std::string> calls = shards_.TakeCalls();
  for (const std::string& call : calls) {
    EXPECT_THAT(call, Not(HasSubstr("drop"))) << call;
  }
  // The freed workers take the next job.
  EXPECT_EQ(Job(next).state(), RUNNING);
  EXPECT_EQ(Assigned(a)->job_id(), next);
}

TEST_F(CoordinatorTest, WorkerErrorFailsTheJob) {
  const std::string a = Register("host-a");
  const std::string job = Submit(Spec(1));
  ProgressReportResponse response =
      Report(a, job, 0, 3, false, "loss is NaN at step 3");
  EXPECT_TRUE(response.abort_job());
  EXPECT_EQ(Job(job).state(), FAILED);
  EXPECT_EQ(Job(job).reason(),
            "worker w-1 (rank 0, host-a) failed: loss is NaN at step 3");
}

TEST_F(CoordinatorTest, ReportProgressChecksJobAndRank) {
  const std::string a = Register("host-a");
  const std::string job = Submit(Spec(1));
  ProgressReport report;
  report.set_worker_id(a);
  report.set_job_id("job-999999");
  ProgressReportResponse response;
  EXPECT_EQ(coord_->ReportProgress(report, &response).code(),
            absl::StatusCode::kNotFound);
  report.set_job_id(job);
  report.set_rank(1);
  absl::Status status = coord_->ReportProgress(report, &response);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("rank: 1 out of range"));
  EXPECT_TRUE(Report("w-7", job, 0, 1).abort_job());
}

// A rate or time that is not a number is refused naming the field, and the
// job's progress stays; an unmeasured loss or accuracy (NaN, as psclient
// sends) is taken.
TEST_F(CoordinatorTest, ReportProgressRefusesRatesThatAreNotNumbers) {
  const std::string a = Register("host-a");
  const std::string job = Submit(Spec(1));
  ASSERT_FALSE(Report(a, job, 0, 5).abort_job());
  ProgressReport report;
  report.set_worker_id(a);
  report.set_job_id(job);
  report.mutable_progress()->set_step(6);
  report.mutable_progress()->set_samples_per_s(
      std::numeric_limits<float>::quiet_NaN());
  ProgressReportResponse response;
  absl::Status status = coord_->ReportProgress(report, &response);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("progress.samples_per_s: nan"));
  report.mutable_progress()->set_samples_per_s(10);
  report.mutable_progress()->set_comm_s(-1);
  status = coord_->ReportProgress(report, &response);
  EXPECT_THAT(status.message(), HasSubstr("progress.comm_s: -1"));
  EXPECT_EQ(Job(job).progress().step(), 5u) << "a refused report changed it";

  report.mutable_progress()->set_comm_s(1);
  report.mutable_progress()->set_loss(std::numeric_limits<float>::quiet_NaN());
  report.mutable_progress()->set_train_accuracy(
      std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(coord_->ReportProgress(report, &response).ok());
  EXPECT_EQ(Job(job).progress().step(), 6u);
}

}  // namespace
}  // namespace ps
