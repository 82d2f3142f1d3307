#include "server/coordinator/coordinator.h"

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/testing/fake_shard_control.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

class FakeClock {
 public:
  absl::Time Now() {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::FromUnixSeconds(1700000000);
};

// A long-poll's outcome; `status` is set once `done` ran.
struct Poll {
  GetAssignmentResponse response;
  std::optional<absl::Status> status;
};

JobSpec Spec(uint32_t num_workers,
             WorkerFailurePolicy policy = WORKER_FAILURE_UNSPECIFIED) {
  JobSpec spec;
  spec.set_name("softmax");
  spec.mutable_model()->mutable_softmax()->set_input_dim(784);
  spec.mutable_model()->mutable_softmax()->set_num_classes(10);
  spec.mutable_data()->set_dataset("fashion-mnist");
  spec.mutable_data()->set_batch_size(32);
  spec.mutable_data()->set_epochs(1);
  spec.mutable_optimizer()->set_kind(SGD);
  spec.mutable_optimizer()->set_learning_rate(0.1f);
  spec.mutable_consistency()->set_mode(BSP);
  spec.set_num_workers(num_workers);
  spec.set_partition_bytes(4096);  // fc0/w: 31360 bytes -> 8 chunks, fc0/b 1
  spec.set_on_worker_failure(policy);
  return spec;
}

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    JobCoordinator::Options options;
    options.heartbeat_interval_ms = 500;
    options.worker_timeout_ms = 10000;
    options.shard_addresses = {"10.0.0.1:7000", "10.0.0.2:7000"};
    options.clock = [this] { return clock_.Now(); };
    absl::StatusOr<std::unique_ptr<JobCoordinator>> coord =
        JobCoordinator::Create(options, &shards_);
    ASSERT_TRUE(coord.ok()) << coord.status();
    coord_ = *std::move(coord);
  }

  std::string Register(const std::string& name) {
    RegisterWorkerRequest request;
    request.set_name(name);
    request.add_devices("cpu:0");
    RegisterWorkerResponse response;
    absl::Status status = coord_->RegisterWorker(request, &response);
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_EQ(response.heartbeat_interval_ms(), 500u);
    return response.worker_id();
  }

  std::string Submit(const JobSpec& spec) {
    SubmitJobRequest request;
    *request.mutable_spec() = spec;
    SubmitJobResponse response;
    absl::Status status = coord_->SubmitJob(request, &response);
    EXPECT_TRUE(status.ok()) << status;
    return response.job_id();
  }

  JobStatus Job(const std::string& job_id) {
    GetJobRequest request;
    request.set_job_id(job_id);
    JobStatus status;
    absl::Status s = coord_->GetJob(request, &status);
    EXPECT_TRUE(s.ok()) << s;
    return status;
  }

  std::unique_ptr<Poll> StartPoll(const std::string& worker_id,
                                  uint32_t wait_ms) {
    auto poll = std::make_unique<Poll>();
    GetAssignmentRequest request;
    request.set_worker_id(worker_id);
    request.set_wait_ms(wait_ms);
    Poll* p = poll.get();
    coord_->GetAssignment(request, &p->response,
                          [p](absl::Status s) { p->status = std::move(s); });
    return poll;
  }

  // A poll that answers at once; fails the test if it parks.
  std::optional<Assignment> Assigned(const std::string& worker_id) {
    std::unique_ptr<Poll> poll = StartPoll(worker_id, 0);
    EXPECT_TRUE(poll->status.has_value());
    EXPECT_TRUE(poll->status->ok()) << *poll->status;
    if (!poll->response.has_assignment()) return std::nullopt;
    return poll->response.assignment();
  }

  HeartbeatResponse Beat(const std::string& worker_id) {
    HeartbeatRequest request;
    request.set_worker_id(worker_id);
    HeartbeatResponse response;
    EXPECT_TRUE(coord_->Heartbeat(request, &response).ok());
    return response;
  }

  ProgressReportResponse Report(const std::string& worker_id,
                                const std::string& job_id, uint32_t rank,
                                uint64_t step, bool finished = false,
                                const std::string& error = "") {
    return Send(Progress(worker_id, job_id, rank, step, finished, error));
  }

  // A progress report with the worker's samples_per_s (the job's rate at
  // this worker's pace, as the trainer computes it).
  ProgressReportResponse ReportRate(const std::string& worker_id,
                                    const std::string& job_id, uint32_t rank,
                                    uint64_t step, float samples_per_s) {
    ProgressReport report = Progress(worker_id, job_id, rank, step);
    report.mutable_progress()->set_samples_per_s(samples_per_s);
    return Send(report);
  }

  static ProgressReport Progress(const std::string& worker_id,
                                 const std::string& job_id, uint32_t rank,
                                 uint64_t step, bool finished = false,
                                 const std::string& error = "") {
    ProgressReport report;
    report.set_worker_id(worker_id);
    report.set_job_id(job_id);
    report.set_rank(rank);
    report.mutable_progress()->set_step(step);
    report.mutable_progress()->set_loss(1.0f / (step + 1));
    report.mutable_progress()->set_test_accuracy(step >= 100 ? 0.84f : -1);
    report.set_finished(finished);
    report.set_error(error);
    return report;
  }

  ProgressReportResponse Send(const ProgressReport& report) {
    ProgressReportResponse response;
    absl::Status status = coord_->ReportProgress(report, &response);
    EXPECT_TRUE(status.ok()) << status;
    return response;
  }

  FakeClock clock_;
  FakeShardControl shards_;
  std::unique_ptr<JobCoordinator> coord_;
};

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
  Beat(a);
  Beat(c);
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

  // Rank 0 lost: rank 2 leads; its progress becomes the job's.
  clock_.Advance(absl::Seconds(10));
  Beat(c);
  coord_->Tick(clock_.Now());
  EXPECT_THAT(shards_.TakeCalls(), ElementsAre("membership 0 job-000001 [2]",
                                               "membership 1 job-000001 [2]"));
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
    EXPECT_THAT(call, ::testing::Not(HasSubstr("drop"))) << call;
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

}  // namespace
}  // namespace ps
