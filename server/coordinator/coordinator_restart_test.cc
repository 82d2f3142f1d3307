// JobCoordinator over a JobStore: a coordinator created again over the same
// store (as a restarted psd does) knows every job and worker, running jobs
// carry on with the workers they had, and ids continue.
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/job_store.h"
#include "server/coordinator/testing/coordinator_test_fixture.h"

namespace ps {
namespace {

class CoordinatorRestartTest : public CoordinatorTest {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* test =
        ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", test->name(), "-",
                         getpid(), "/jobs.sqlite");
    ASSERT_NO_FATAL_FAILURE(Start());
  }

  void Start() {
    JobStore::Options store_options;
    store_options.path = path_;
    absl::StatusOr<std::unique_ptr<JobStore>> store =
        JobStore::Open(store_options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    JobCoordinator::Options options;
    options.heartbeat_interval_ms = 500;
    options.worker_timeout_ms = 10000;
    options.shard_addresses = {"10.0.0.1:7000", "10.0.0.2:7000"};
    options.clock = [this] { return clock_.Now(); };
    options.store = store_.get();
    absl::StatusOr<std::unique_ptr<JobCoordinator>> coord =
        JobCoordinator::Create(options, &shards_);
    ASSERT_TRUE(coord.ok()) << coord.status();
    coord_ = *std::move(coord);
  }

  // The coordinator and its store go away (as with kill -9: nothing is
  // written at the end that was not written before) and come back.
  void Restart() {
    coord_.reset();
    store_.reset();
    shards_.TakeCalls();
    clock_.Advance(absl::Seconds(3));
    ASSERT_NO_FATAL_FAILURE(Start());
  }

  ListJobsResponse List() {
    ListJobsResponse list;
    EXPECT_TRUE(coord_->ListJobs(ListJobsRequest(), &list).ok());
    return list;
  }

  std::string path_;
  std::unique_ptr<JobStore> store_;
};

TEST_F(CoordinatorRestartTest, RunningJobCarriesOnWithItsWorkers) {
  const std::string w1 = Register("host-a");
  const std::string w2 = Register("host-b");
  const std::string job = Submit(Spec(2));
  ASSERT_EQ(Job(job).state(), RUNNING);
  Report(w1, job, 0, 50);
  ASSERT_NO_FATAL_FAILURE(Restart());

  JobStatus status = Job(job);
  EXPECT_EQ(status.state(), RUNNING);
  EXPECT_EQ(status.progress().step(), 50u);
  EXPECT_EQ(status.spec().num_workers(), 2u);
  EXPECT_EQ(status.placement().chunks_size(), 9);
  EXPECT_TRUE(shards_.TakeCalls().empty()) << "a running job is left alone";
  // The workers' heartbeats carry on under the ids they had.
  EXPECT_FALSE(Beat(w1).reregister());
  EXPECT_FALSE(Beat(w2).reregister());
  EXPECT_FALSE(Report(w2, job, 1, 100, /*finished=*/true).abort_job());
  EXPECT_FALSE(Report(w1, job, 0, 100, /*finished=*/true).abort_job());
  status = Job(job);
  EXPECT_EQ(status.state(), SUCCEEDED) << status.reason();
  EXPECT_EQ(status.progress().step(), 100u);

  // Ids continue from the highest stored.
  EXPECT_EQ(Register("host-c"), "w-3");
  EXPECT_EQ(Submit(Spec(1)), "job-000002");
}

TEST_F(CoordinatorRestartTest, AScaleInProgressSurvivesARestart) {
  const std::string w1 = Register("host-a");
  JobSpec spec = Spec(1, SHRINK);
  spec.set_max_workers(3);
  const std::string job = Submit(spec);
  ScaleJobRequest scale;
  scale.set_job_id(job);
  scale.set_workers(3);
  ScaleJobResponse scaled;
  ASSERT_TRUE(coord_->ScaleJob(scale, &scaled).ok());
  const std::string w2 = Register("host-b");  // takes rank 1
  ASSERT_NO_FATAL_FAILURE(Restart());

  JobStatus status = Job(job);
  EXPECT_EQ(status.scale().target_workers(), 3u);
  EXPECT_EQ(status.scale().active_workers(), 2u);
  EXPECT_EQ(status.scale().reached_s(), 0);
  // The scale goes on: the next worker takes the last slot.
  const std::string w3 = Register("host-c");
  std::optional<Assignment> assigned = Assigned(w3);
  ASSERT_TRUE(assigned.has_value());
  EXPECT_EQ(assigned->rank(), 2u);
  EXPECT_EQ(assigned->num_workers(), 3u);
  status = Job(job);
  EXPECT_EQ(status.scale().active_workers(), 3u);
  EXPECT_GT(status.scale().reached_s(), 0);
}

TEST_F(CoordinatorRestartTest, AWorkerThatNeverComesBackIsLost) {
  const std::string w1 = Register("host-a");
  const std::string w2 = Register("host-b");
  const std::string job = Submit(Spec(2));
  ASSERT_NO_FATAL_FAILURE(Restart());
  clock_.Advance(absl::Seconds(6));
  Beat(w1);  // w-2 stays silent
  clock_.Advance(absl::Seconds(5));
  coord_->Tick(clock_.Now());
  const JobStatus status = Job(job);
  EXPECT_EQ(status.state(), FAILED);
  EXPECT_NE(status.reason().find(w2), std::string::npos) << status.reason();
}

TEST_F(CoordinatorRestartTest, EndedJobsStayAndPendingJobsQueueAgain) {
  const std::string w1 = Register("host-a");
  const std::string done = Submit(Spec(1));
  Report(w1, done, 0, 100, /*finished=*/true);
  const std::string cancelled = Submit(Spec(3));
  CancelJobResponse cancel;
  CancelJobRequest cancel_request;
  cancel_request.set_job_id(cancelled);
  ASSERT_TRUE(coord_->CancelJob(cancel_request, &cancel).ok());
  const std::string pending = Submit(Spec(2));
  ASSERT_EQ(Job(pending).state(), PENDING);
  ASSERT_NO_FATAL_FAILURE(Restart());

  const ListJobsResponse list = List();
  ASSERT_EQ(list.jobs_size(), 3);
  EXPECT_EQ(list.jobs(0).state(), SUCCEEDED);
  EXPECT_EQ(list.jobs(0).progress().test_accuracy(), 0.84f);
  EXPECT_NE(list.jobs(0).end_time_s(), 0);
  EXPECT_EQ(list.jobs(1).state(), CANCELLED);
  EXPECT_EQ(list.jobs(2).state(), PENDING);
  // w-1 (idle, reloaded) and one new worker are enough for it.
  Register("host-b");
  EXPECT_EQ(Job(pending).state(), RUNNING);

  // The finished job's history: its leader's reports.
  absl::StatusOr<std::vector<ps::Progress>> history = store_->History(done);
  ASSERT_TRUE(history.ok()) << history.status();
  ASSERT_EQ(history->size(), 1u);
  EXPECT_EQ(history->back().step(), 100u);
}

TEST_F(CoordinatorRestartTest, ACustomModelJobKeepsItsJoinedWorkers) {
  JobSpec spec;
  spec.set_name("torch-mlp");
  spec.set_num_workers(2);
  spec.mutable_data()->set_batch_size(32);
  spec.mutable_optimizer()->set_kind(SGD);
  spec.mutable_optimizer()->set_learning_rate(0.1f);
  spec.mutable_consistency()->set_mode(BSP);
  TensorSpec* w = spec.mutable_model()->mutable_custom()->add_tensors();
  w->set_name("fc.weight");
  w->add_shape(10);
  w->add_shape(784);
  w->mutable_init()->set_kind(ZEROS);
  SubmitJobRequest submit;
  *submit.mutable_spec() = spec;
  submit.set_join_existing(true);
  SubmitJobResponse submitted;
  ASSERT_TRUE(coord_->SubmitJob(submit, &submitted).ok());
  const std::string job = submitted.job_id();
  std::string ids[2];
  for (int i = 0; i < 2; ++i) {
    RegisterWorkerRequest request;
    request.set_name(absl::StrCat("py-", i));
    request.set_job_id(job);
    RegisterWorkerResponse response;
    ASSERT_TRUE(coord_->RegisterWorker(request, &response).ok());
    ids[i] = response.worker_id();
  }
  ASSERT_EQ(Job(job).state(), RUNNING);
  ASSERT_NO_FATAL_FAILURE(Restart());

  // Joining again finds the running job; a third worker is refused.
  SubmitJobResponse again;
  ASSERT_TRUE(coord_->SubmitJob(submit, &again).ok());
  EXPECT_TRUE(again.joined());
  EXPECT_EQ(again.job_id(), job);
  RegisterWorkerRequest third;
  third.set_name("py-2");
  third.set_job_id(job);
  RegisterWorkerResponse third_response;
  EXPECT_EQ(coord_->RegisterWorker(third, &third_response).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(Report(ids[1], job, 1, 10, /*finished=*/true).abort_job());
  EXPECT_FALSE(Report(ids[0], job, 0, 10, /*finished=*/true).abort_job());
  EXPECT_EQ(Job(job).state(), SUCCEEDED);
}

TEST_F(CoordinatorRestartTest, CurveSurvivesTheRestart) {
  const std::string w1 = Register("host-a");
  const std::string job = Submit(Spec(1));
  for (uint64_t step : {10, 20, 30}) Report(w1, job, 0, step);
  ASSERT_NO_FATAL_FAILURE(Restart());
  GetHistoryRequest request;
  request.set_job_id(job);
  GetHistoryResponse history;
  ASSERT_TRUE(coord_->GetHistory(request, &history).ok());
  ASSERT_EQ(history.points_size(), 3);
  EXPECT_EQ(history.points(2).step(), 30u);
  EXPECT_FLOAT_EQ(history.points(2).loss(), 1.0f / 31);
  Report(w1, job, 0, 40);  // the curve goes on after the restart
  ASSERT_TRUE(coord_->GetHistory(request, &history).ok());
  EXPECT_EQ(history.points_size(), 4);
}

TEST_F(CoordinatorRestartTest, AnElasticJobsDataPlanSurvivesARestart) {
  const std::string w1 = Register("host-a");
  Register("host-b");
  const std::string job = Submit(ElasticMlp());
  ASSERT_EQ(Job(job).state(), RUNNING);
  GetDataPlanRequest ask;
  ask.set_worker_id(w1);
  ask.set_step(0);
  ask.set_train_examples(600);
  GetDataPlanResponse plan;
  ASSERT_TRUE(coord_->GetDataPlan(ask, &plan).ok());
  const DataPlan sealed = Job(job).data_plan();
  ASSERT_GT(sealed.segments_size(), 0);
  ASSERT_NO_FATAL_FAILURE(Restart());
  // Before, only the (empty) plan of the submit was stored.
  EXPECT_EQ(Job(job).data_plan().SerializeAsString(),
            sealed.SerializeAsString());
}

}  // namespace
}  // namespace ps
