// The coordinator's own psd dies in a replicated job (issue 28, item 5):
// the coordinator lives in shard 0, so its restart is also shard 0's. A
// synthetic BSP job with no checkpoints, the coordinator's state in
// state_dir. psd 0 is killed with SIGKILL mid-job and restarted on its port:
// the coordinator reloads the job and the replica view, fails its own
// (empty) shard over under a new epoch before anyone can be served from
// it, and the workers follow the acting primaries; shard 0 then rejoins and
// catches up. Case 2 restarts it in the middle of another failover (shard 1
// killed, its failover under way; 4 shards, replication 3). Both jobs
// end SUCCEEDED with parameters bitwise equal to an undisturbed run's.
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "tests/job_parameters.h"
#include "tests/local_cluster.h"
#include "tests/testing/cluster_fixture.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// 4096 examples / (2 workers x 32) = 64 steps per epoch, 192 in all.
constexpr uint64_t kTotalSteps = 192;
constexpr uint64_t kKillAfterStep = 20;

LocalClusterOptions Options(int shards) {
  LocalClusterOptions o;
  o.shards = shards;
  o.psd_extra = "state_dir: \"state\"";
  // Enough retries (backoff capped at 2 s) to outlast the restart.
  o.workerd_extra = "rpc_max_attempts: 30";
  return o;
}

enum class Disturb { kNone, kCoordinator, kCoordinatorMidFailover };

struct RunResult {
  uint64_t checksum = 0;
  float test_accuracy = -1;
};

// Kills psd 0 and starts it again on its port.
void RestartCoordinator(LocalCluster& cluster, const std::string& address) {
  cluster.shard(0).Kill();
  absl::Status restarted =
      cluster.StartShard(0, absl::StrCat("listen_address: \"", address, "\""));
  ASSERT_TRUE(restarted.ok()) << restarted << cluster.Log("psd0");
}

void TrainOnce(const std::string& name, int shards, int replication,
               Disturb disturb, RunResult* result) {
  LocalCluster cluster(TestDir(name), Options(shards));
  ASSERT_TRUE(cluster.Start().ok());
  absl::StatusOr<RunningJob> running = StartJobUntilStep(
      cluster, ReplicatedMlpJob("replicated-coordinator", replication), shards,
      disturb == Disturb::kNone ? 0 : kKillAfterStep, absl::Seconds(120));
  ASSERT_TRUE(running.ok()) << running.status();
  const std::string& job = running->id;
  std::vector<std::string> live = running->addresses;

  if (disturb == Disturb::kCoordinatorMidFailover) {
    // Shard 1 dies; the coordinator notices (its "missed" line comes just
    // before it commits the new epoch and tells the shards) and dies too:
    // before the commit, during it, or while it tells the shards. Each
    // order must end consistent: the restarted coordinator fails over
    // whatever its store says is not failed yet (its own shard at once,
    // shard 1 once it misses the heartbeats again).
    cluster.shard(1).Kill();
    ASSERT_TRUE(AwaitLog(cluster, "psd0", "coordinator: shard 1 missed",
                         absl::Seconds(60))
                    .ok());
  }
  if (disturb != Disturb::kNone) {
    std::cout << "killing psd 0 (coordinator and shard 0) at step "
              << JobStep(cluster, job) << std::endl;
    ASSERT_NO_FATAL_FAILURE(RestartCoordinator(cluster, live[0]));
    ASSERT_TRUE(AwaitLog(cluster, "psd0", "coordinator: shard 0 caught up",
                         absl::Seconds(120))
                    .ok())
        << cluster.Log("psd0");
  }

  absl::StatusOr<JobStatus> end = WaitForJob(
      cluster, job, [](const JobStatus&) { return false; }, absl::Seconds(240),
      WhileUnreachable::kRetry);
  ASSERT_TRUE(end.ok()) << end.status();
  ASSERT_EQ(end->state(), SUCCEEDED)
      << end->reason() << "\n--- psd0 ---\n"
      << cluster.Log("psd0") << "\n--- worker0 ---\n"
      << cluster.Log("worker0");
  EXPECT_EQ(end->progress().step(), kTotalSteps);
  result->test_accuracy = end->progress().test_accuracy();
  if (disturb != Disturb::kNone) {
    const std::string log = cluster.Log("psd0");
    EXPECT_THAT(log, HasSubstr("its own shard 0 restarted empty"));
    for (absl::string_view line : absl::StrSplit(log, '\n')) {
      if (absl::StrContains(line, "epoch") &&
          absl::StrContains(line, "coordinator: ")) {
        std::cout << line << std::endl;
      }
    }
    // Read each shard's chunks from where they are served now: a rejoined
    // shard is a backup, its chunks stay with the next live copy.
    live[0] = live[disturb == Disturb::kCoordinatorMidFailover ? 2 : 1];
    if (disturb == Disturb::kCoordinatorMidFailover) live[1] = live[2];
  }
  absl::StatusOr<FinishedJob> finished = ReadFinishedJob(cluster, job, live);
  ASSERT_TRUE(finished.ok()) << finished.status();
  result->checksum = finished->checksum;
  (void)cluster.Stop();  // a killed shard exits by SIGKILL
}

class ReplicatedCoordinatorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    TrainOnce("undisturbed", 3, 1, Disturb::kNone, &calm_);
  }
  static RunResult calm_;
};
RunResult ReplicatedCoordinatorTest::calm_;

TEST_F(ReplicatedCoordinatorTest, ARestartedCoordinatorFailsItsOwnShardOver) {
  ASSERT_NE(calm_.checksum, 0u);
  RunResult restarted;
  ASSERT_NO_FATAL_FAILURE(
      TrainOnce("restarted", 3, 2, Disturb::kCoordinator, &restarted));
  EXPECT_EQ(restarted.checksum, calm_.checksum)
      << "the restart changed the parameters";
  EXPECT_EQ(restarted.test_accuracy, calm_.test_accuracy);
}

TEST_F(ReplicatedCoordinatorTest, ARestartInTheMiddleOfAFailover) {
  ASSERT_NE(calm_.checksum, 0u);
  RunResult restarted;
  ASSERT_NO_FATAL_FAILURE(TrainOnce(
      "mid_failover", 4, 3, Disturb::kCoordinatorMidFailover, &restarted));
  EXPECT_EQ(restarted.checksum, calm_.checksum)
      << "the restart changed the parameters";
  EXPECT_EQ(restarted.test_accuracy, calm_.test_accuracy);
}

}  // namespace
}  // namespace ps
