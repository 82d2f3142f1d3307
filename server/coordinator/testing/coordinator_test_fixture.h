// The fixture the JobCoordinator tests share: a coordinator over two fake
// shards with a fake clock, and one-line helpers for each RPC.
//
//   TEST_F(CoordinatorTest, Example) {
//     const std::string w = Register("host-a");          // "w-1"
//     const std::string job = Submit(Spec(1));            // starts at once
//     EXPECT_EQ(Job(job).state(), RUNNING);
//     clock_.Advance(absl::Seconds(10));
//     coord_->Tick(clock_.Now());                          // w-1 lost
//   }
#ifndef SERVER_COORDINATOR_TESTING_COORDINATOR_TEST_FIXTURE_H_
#define SERVER_COORDINATOR_TESTING_COORDINATOR_TEST_FIXTURE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/testing/fake_shard_control.h"

namespace ps {

// Starts at 1700000000 (unix seconds); moves only when told. Thread-safe.
class FakeClock {
 public:
  absl::Time Now();
  void Advance(absl::Duration d);

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::FromUnixSeconds(1700000000);
};

// A long-poll's outcome; `status` is set once `done` ran.
struct Poll {
  GetAssignmentResponse response;
  std::optional<absl::Status> status;
};

// An elastic data job: an MLP of 2 workers that may grow to 3 (SHRINK), 2
// epochs of a set the workers load with 600 examples: 600 / (2 x 32) = 9
// steps per epoch on 2 workers, 600 / (3 x 32) = 6 on 3.
JobSpec ElasticMlp();

// A valid softmax spec whose placement on 2 shards has 9 chunks.
JobSpec Spec(uint32_t num_workers,
             WorkerFailurePolicy policy = WORKER_FAILURE_UNSPECIFIED);

// Shard addresses 10.0.0.1:7000 and 10.0.0.2:7000, heartbeats every 500 ms,
// workers lost after 10 s. Each helper checks that its call succeeded.
class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override;

  // The new worker's id.
  std::string Register(const std::string& name);
  // The new job's id.
  std::string Submit(const JobSpec& spec);
  JobStatus Job(const std::string& job_id);
  std::unique_ptr<Poll> StartPoll(const std::string& worker_id,
                                  uint32_t wait_ms);
  // A poll that answers at once; fails the test if it parks.
  std::optional<Assignment> Assigned(const std::string& worker_id);
  HeartbeatResponse Beat(const std::string& worker_id);
  ProgressReportResponse Report(const std::string& worker_id,
                                const std::string& job_id, uint32_t rank,
                                uint64_t step, bool finished = false,
                                const std::string& error = "");
  // A progress report with the worker's samples_per_s (the job's rate at
  // this worker's pace, as the trainer computes it).
  ProgressReportResponse ReportRate(const std::string& worker_id,
                                    const std::string& job_id, uint32_t rank,
                                    uint64_t step, float samples_per_s);
  // Loss 1 / (step + 1); test accuracy 0.84 from step 100, else -1.
  static ProgressReport Progress(const std::string& worker_id,
                                 const std::string& job_id, uint32_t rank,
                                 uint64_t step, bool finished = false,
                                 const std::string& error = "");
  ProgressReportResponse Send(const ProgressReport& report);

  FakeClock clock_;
  FakeShardControl shards_;
  std::unique_ptr<JobCoordinator> coord_;
};

}  // namespace ps

#endif  // SERVER_COORDINATOR_TESTING_COORDINATOR_TEST_FIXTURE_H_
