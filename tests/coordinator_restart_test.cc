// 2 psd + 2 workerd train a synthetic BSP job; psd 0 is the coordinator
// (with a job store in state_dir) and checkpoints its shard every step. In
// the middle of the run psd 0 is killed with SIGKILL and restarted on the
// same port with the same config. The restarted coordinator reloads the job,
// the workers reattach under their ids (within 5 s), and the job ends
// SUCCEEDED, visible in `psctl status` and `psctl list`, with parameters
// bitwise identical to an undisturbed run's (so no step was applied twice)
// and the same test accuracy.
#include <cstdint>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/text_proto.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "tests/job_parameters.h"
#include "tests/local_cluster.h"
#include "tests/testing/cluster_fixture.h"

namespace ps {
namespace {

// 4096 examples / (2 workers x 32) = 64 steps per epoch, 192 in all.
constexpr uint64_t kTotalSteps = 192;
// psd 0 dies once the coordinator has seen this step.
constexpr uint64_t kKillAfterStep = 60;
constexpr int kWorkers = 2;
// The target: every worker reattached within this long of the restart.
constexpr absl::Duration kReattachBound = absl::Seconds(5);

constexpr char kJob[] = R"pb(
  name: "coordinator-restart"
  model { mlp { input_dim: 784 hidden: 32 num_classes: 10 } }
  data {
    dataset: "synthetic"
    batch_size: 32
    epochs: 3
    synthetic_train: 4096
    synthetic_test: 512
  }
  optimizer { kind: SGD learning_rate: 0.05 momentum: 0.9 }
  consistency { mode: BSP step_deadline_ms: 30000 }
  num_workers: 2
  partition_bytes: 16384
  seed: 11
  eval_every: 20
  checkpoint { every_steps: 1 }
)pb";

LocalClusterOptions Options() {
  LocalClusterOptions o;
  o.psd_extra = "checkpoint_dir: \"ckpt\"\nstate_dir: \"state\"";
  // Enough retries (backoff capped at 2 s) to outlast the restart.
  o.workerd_extra = "rpc_max_attempts: 30";
  return o;
}

struct RunResult {
  uint64_t checksum = 0;
  float test_accuracy = -1;
  uint64_t steps = 0;
  std::vector<JobStats> shard_stats;  // by shard
  double reattach_s = -1;             // restart command to last reattach
};

// The restarted coordinator's "worker ... reattached" log lines so far.
int Reattached(const LocalCluster& cluster) {
  int n = 0;
  for (absl::string_view line : absl::StrSplit(cluster.Log("psd0"), '\n')) {
    if (absl::StrContains(line, "reattached")) ++n;
  }
  return n;
}

// Kills psd 0 past kKillAfterStep, restarts it on its port, and measures
// how long until every worker has reattached.
void KillAndRestartCoordinator(LocalCluster& cluster, const std::string& job,
                               const std::string& address, RunResult* result) {
  // While the coordinator restarts psctl cannot reach it: those rounds are
  // retried; an "unknown job" answer fails.
  absl::StatusOr<JobStatus> mid = WaitForJob(
      cluster, job,
      [](const JobStatus& js) {
        return js.progress().step() >= kKillAfterStep;
      },
      absl::Seconds(120), WhileUnreachable::kRetry);
  ASSERT_TRUE(mid.ok()) << mid.status();
  ASSERT_EQ(mid->state(), RUNNING)
      << "ended before the kill: " << mid->reason();
  std::cout << "killing psd 0 (coordinator) at step " << mid->progress().step()
            << std::endl;
  cluster.shard(0).Kill();
  const absl::Time restart = absl::Now();
  absl::Status restarted =
      cluster.StartShard(0, absl::StrCat("listen_address: \"", address, "\""));
  ASSERT_TRUE(restarted.ok()) << restarted << cluster.Log("psd0");
  // Each round is one psctl call, which also checks the job stays known.
  const absl::Time deadline = restart + absl::Seconds(30);
  while (Reattached(cluster) < kWorkers && absl::Now() < deadline) {
    bool unknown = false;
    absl::StatusOr<JobStatus> js = ReadJobStatus(cluster, job, &unknown);
    ASSERT_FALSE(unknown) << "the restarted coordinator forgot " << job;
  }
  result->reattach_s = absl::ToDoubleSeconds(absl::Now() - restart);
  ASSERT_EQ(Reattached(cluster), kWorkers) << cluster.Log("psd0");
  std::cout << "workers reattached " << result->reattach_s
            << " s after the restart command" << std::endl;
  for (absl::string_view line : absl::StrSplit(cluster.Log("psd0"), '\n')) {
    if (absl::StrContains(line, "reattached") ||
        absl::StrContains(line, "reloaded")) {
      std::cout << line << std::endl;
    }
  }
}

void TrainOnce(const std::string& name, bool kill_coordinator,
               RunResult* result) {
  const std::string dir = TestDir(name);
  LocalCluster cluster(dir, Options());
  ASSERT_TRUE(cluster.Start().ok());
  absl::StatusOr<std::string> submitted = SubmitJob(cluster, kJob);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const std::string& job = *submitted;
  absl::StatusOr<std::vector<std::string>> shard_addresses =
      ShardAddresses(cluster, 2);
  ASSERT_TRUE(shard_addresses.ok()) << shard_addresses.status();
  const std::vector<std::string>& addresses = *shard_addresses;

  if (kill_coordinator) {
    ASSERT_NO_FATAL_FAILURE(
        KillAndRestartCoordinator(cluster, job, addresses[0], result));
  }

  absl::StatusOr<JobStatus> end = WaitForJob(
      cluster, job, [](const JobStatus&) { return false; }, absl::Seconds(240),
      WhileUnreachable::kRetry);
  ASSERT_TRUE(end.ok()) << end.status();
  ASSERT_EQ(end->state(), SUCCEEDED)
      << end->reason() << "\n--- psd0 ---\n"
      << cluster.Log("psd0") << "\n--- worker0 ---\n"
      << cluster.Log("worker0");
  result->steps = end->progress().step();
  result->test_accuracy = end->progress().test_accuracy();
  EXPECT_EQ(result->steps, kTotalSteps);

  // The finished job is listed with its result.
  absl::StatusOr<CommandResult> list = cluster.Psctl({"list", "--all"});
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->exit_code, 0) << list->err;
  bool listed = false;
  for (absl::string_view line : absl::StrSplit(list->out, '\n')) {
    listed |=
        absl::StartsWith(line, job) && absl::StrContains(line, "SUCCEEDED") &&
        absl::StrContains(line, absl::StrFormat("%.4f", result->test_accuracy));
  }
  EXPECT_TRUE(listed) << list->out;

  // The parameters stay on the shards after success: read them all back.
  absl::StatusOr<FinishedJob> finished =
      ReadFinishedJob(cluster, job, addresses);
  ASSERT_TRUE(finished.ok()) << finished.status();
  ASSERT_EQ(finished->status.progress().step(), result->steps);
  result->checksum = finished->checksum;
  result->shard_stats = finished->shard_stats;
  absl::Status stopped = cluster.Stop();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

TEST(CoordinatorRestartTest, KilledCoordinatorReloadsAndTheJobSucceeds) {
  RunResult calm, killed;
  ASSERT_NO_FATAL_FAILURE(TrainOnce("undisturbed", false, &calm));
  ASSERT_NO_FATAL_FAILURE(TrainOnce("killed", true, &killed));

  for (size_t shard = 0; shard < killed.shard_stats.size(); ++shard) {
    const JobStats& s = killed.shard_stats[shard];
    std::cout << "shard " << shard << ": version " << s.version()
              << ", restored from step " << s.restored_from_step()
              << ", duplicates " << s.duplicates() << ", stale "
              << s.stale_pushes() << std::endl;
    // One update per step: none applied twice, none lost.
    EXPECT_EQ(s.version(), kTotalSteps);
  }
  EXPECT_GE(killed.shard_stats[0].restored_from_step(), kKillAfterStep);
  std::cout << "test accuracy: undisturbed " << calm.test_accuracy
            << ", coordinator killed " << killed.test_accuracy << "; reattach "
            << killed.reattach_s << " s" << std::endl;
  EXPECT_LT(killed.reattach_s, absl::ToDoubleSeconds(kReattachBound));
  EXPECT_EQ(killed.checksum, calm.checksum)
      << "the restart changed the parameters";
  EXPECT_NEAR(killed.test_accuracy, calm.test_accuracy, 0.01);
}

}  // namespace
}  // namespace ps
