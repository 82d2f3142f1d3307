#include "server/coordinator/testing/coordinator_test_fixture.h"

#include <utility>

namespace ps {

absl::Time FakeClock::Now() {
  absl::MutexLock lock(&mu_);
  return now_;
}

void FakeClock::Advance(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  now_ += d;
}

JobSpec Spec(uint32_t num_workers, WorkerFailurePolicy policy) {
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

JobSpec ElasticMlp() {
  JobSpec spec = Spec(2, SHRINK);
  spec.mutable_model()->Clear();
  Mlp* mlp = spec.mutable_model()->mutable_mlp();
  mlp->set_input_dim(784);
  mlp->add_hidden(8);
  mlp->set_num_classes(10);
  spec.mutable_data()->set_epochs(2);
  spec.set_max_workers(3);
  return spec;
}

void CoordinatorTest::SetUp() {
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

std::string CoordinatorTest::Register(const std::string& name) {
  RegisterWorkerRequest request;
  request.set_name(name);
  request.add_devices("cpu:0");
  RegisterWorkerResponse response;
  absl::Status status = coord_->RegisterWorker(request, &response);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(response.heartbeat_interval_ms(), 500u);
  return response.worker_id();
}

std::string CoordinatorTest::Submit(const JobSpec& spec) {
  SubmitJobRequest request;
  *request.mutable_spec() = spec;
  SubmitJobResponse response;
  absl::Status status = coord_->SubmitJob(request, &response);
  EXPECT_TRUE(status.ok()) << status;
  return response.job_id();
}

JobStatus CoordinatorTest::Job(const std::string& job_id) {
  GetJobRequest request;
  request.set_job_id(job_id);
  JobStatus status;
  absl::Status s = coord_->GetJob(request, &status);
  EXPECT_TRUE(s.ok()) << s;
  return status;
}

std::unique_ptr<Poll> CoordinatorTest::StartPoll(const std::string& worker_id,
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

std::optional<Assignment> CoordinatorTest::Assigned(
    const std::string& worker_id) {
  std::unique_ptr<Poll> poll = StartPoll(worker_id, 0);
  EXPECT_TRUE(poll->status.has_value());
  EXPECT_TRUE(poll->status->ok()) << *poll->status;
  if (!poll->response.has_assignment()) return std::nullopt;
  return poll->response.assignment();
}

HeartbeatResponse CoordinatorTest::Beat(const std::string& worker_id) {
  HeartbeatRequest request;
  request.set_worker_id(worker_id);
  HeartbeatResponse response;
  EXPECT_TRUE(coord_->Heartbeat(request, &response).ok());
  return response;
}

ProgressReportResponse CoordinatorTest::Report(const std::string& worker_id,
                                               const std::string& job_id,
                                               uint32_t rank, uint64_t step,
                                               bool finished,
                                               const std::string& error) {
  return Send(Progress(worker_id, job_id, rank, step, finished, error));
}

ProgressReportResponse CoordinatorTest::ReportRate(const std::string& worker_id,
                                                   const std::string& job_id,
                                                   uint32_t rank, uint64_t step,
                                                   float samples_per_s) {
  ProgressReport report = Progress(worker_id, job_id, rank, step);
  report.mutable_progress()->set_samples_per_s(samples_per_s);
  return Send(report);
}

ProgressReport CoordinatorTest::Progress(const std::string& worker_id,
                                         const std::string& job_id,
                                         uint32_t rank, uint64_t step,
                                         bool finished,
                                         const std::string& error) {
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

ProgressReportResponse CoordinatorTest::Send(const ProgressReport& report) {
  ProgressReportResponse response;
  absl::Status status = coord_->ReportProgress(report, &response);
  EXPECT_TRUE(status.ok()) << status;
  return response;
}

}  // namespace ps
