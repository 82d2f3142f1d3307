// A worker dies (kill -9) in the middle of a BSP job:
//   FAIL   -> the job fails within the heartbeat timeout, the reason names
//             the worker, and the surviving worker is free for the next job;
//   SHRINK -> training goes on with the survivor; the restarted worker
//             rejoins at the current step; the job succeeds. When rank 0
//             is the one lost, the survivor leads: it evaluates the test
//             set and the job ends with a test accuracy.
// Nothing hangs: every wait below has a deadline.
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/text_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "tests/local_cluster.h"
#include "tests/testing/cluster_fixture.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

std::string Job(const std::string& policy, int epochs, int workers) {
  return absl::StrCat(
      R"pb(
        name: "failure"
        model { mlp { input_dim: 784 hidden: 32 num_classes: 10 } }
        data { dataset: "synthetic" batch_size: 16 synthetic_train: 4096
               synthetic_test: 256
               epochs:)pb",
      epochs, R"pb(}
                   optimizer { kind: SGD learning_rate: 0.05 }
    consistency { mode: BSP step_deadline_ms: 60000 }
    partition_bytes: 16384
    seed: 3
    num_workers: )pb",
      workers, "\non_worker_failure: ", policy, "\n");
}

class WorkerFailureTest : public ClusterTest {};

TEST_F(WorkerFailureTest, FailPolicyFailsJobNamingTheWorkerAndFreesTheOther) {
  std::string job = Submit(Job("FAIL", 1000, 2));
  JobStatus js;
  ASSERT_TRUE(WaitFor(
      job, [](const JobStatus& s) { return s.progress().step() >= 20; },
      absl::Seconds(60), &js))
      << js.ShortDebugString();
  cluster_->worker(1).Kill();
  absl::Time killed = absl::Now();
  ASSERT_TRUE(WaitFor(
      job, [](const JobStatus& s) { return s.state() == FAILED; },
      absl::Seconds(30), &js))
      << js.ShortDebugString();
  // worker_timeout_ms is 3000 in LocalCluster; the housekeeping tick adds
  // at most 100 ms.
  EXPECT_LT(absl::Now() - killed, absl::Seconds(10));
  EXPECT_THAT(js.reason(), HasSubstr("worker1"));
  EXPECT_THAT(js.reason(), HasSubstr("lost"));

  // The survivor is not stuck in its BSP wait: a one-worker job runs.
  absl::StatusOr<CommandResult> r =
      RunJob(*cluster_, Job("FAIL", 1, 1), absl::Seconds(60));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 0) << r->out << r->err << cluster_->Log("worker0");
}

TEST_F(WorkerFailureTest, ShrinkPolicyContinuesAndTheRestartedWorkerRejoins) {
  // Long enough (8192 steps) that the survivor, running alone at up to a
  // few thousand steps/s, is still at it when worker1 is back.
  std::string job = Submit(Job("SHRINK", 64, 2));
  JobStatus js;
  ASSERT_TRUE(WaitFor(
      job, [](const JobStatus& s) { return s.progress().step() >= 20; },
      absl::Seconds(60), &js))
      << js.ShortDebugString();
  cluster_->worker(1).Kill();
  const uint64_t step_at_kill = js.progress().step();
  // The survivor goes on alone once the coordinator declares worker1 lost.
  ASSERT_TRUE(WaitFor(
      job,
      [&](const JobStatus& s) {
        return s.state() != RUNNING || s.progress().step() > step_at_kill + 50;
      },
      absl::Seconds(30), &js))
      << js.ShortDebugString();
  ASSERT_EQ(js.state(), RUNNING) << js.reason();
  // worker1 comes back under the same name and takes its rank again.
  ASSERT_TRUE(cluster_->StartWorker(1).ok());
  ASSERT_TRUE(WaitFor(
      job, [](const JobStatus& s) { return s.state() != RUNNING; },
      absl::Seconds(200), &js))
      << js.ShortDebugString();
  EXPECT_EQ(js.state(), SUCCEEDED) << js.reason() << cluster_->Log("worker1");
  EXPECT_THAT(cluster_->Log("psd0"), HasSubstr("rejoined"));
  EXPECT_THAT(cluster_->Log("worker1"), HasSubstr("starting at step"));
}

TEST_F(WorkerFailureTest, ShrinkWithoutRankZeroStillEvaluates) {
  std::string job = Submit(Job("SHRINK", 32, 2));
  JobStatus js;
  ASSERT_TRUE(WaitFor(
      job, [](const JobStatus& s) { return s.progress().step() >= 20; },
      absl::Seconds(60), &js))
      << js.ShortDebugString();
  ASSERT_EQ(js.workers_size(), 2) << js.ShortDebugString();
  // Kill rank 0's worker (workers register in either order).
  const int rank0 = js.workers(0) == "worker0" ? 0 : 1;
  cluster_->worker(rank0).Kill();
  ASSERT_TRUE(WaitFor(
      job, [](const JobStatus& s) { return s.state() != RUNNING; },
      absl::Seconds(200), &js))
      << js.ShortDebugString();
  const std::string survivor = absl::StrCat("worker", 1 - rank0);
  ASSERT_EQ(js.state(), SUCCEEDED) << js.reason() << cluster_->Log(survivor);
  // The survivor (rank 1) learned from its heartbeats that it leads and ran
  // the final evaluation; before, a job without rank 0 ended without one.
  EXPECT_GE(js.progress().test_accuracy(), 0.0f) << js.ShortDebugString();
  EXPECT_THAT(js.reason(), HasSubstr("test accuracy")) << js.reason();
  EXPECT_THAT(cluster_->Log(survivor), HasSubstr("finished, test accuracy"));
}

}  // namespace
}  // namespace ps
