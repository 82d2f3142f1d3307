// 2 psd + 2 workerd train a synthetic BSP job with a checkpoint every step.
// In the middle of the run shard 1 is killed with SIGKILL and restarted with
// the same config, either on the same port or on a new one (port 0: as
// under a scheduler; it rewrites its address file, and until then the file
// holds garbage). The workers ride through on their retries (finding the
// moved shard through the coordinator, which re-reads the address file),
// the job succeeds, and its parameters are bitwise identical to an
// undisturbed run's; shard 1's stats say it restored from a step > 0.
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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

// 8192 examples / (2 workers x 32) = 128 steps per epoch, 384 in all.
constexpr uint64_t kTotalSteps = 384;
// Shard 1 dies once the coordinator has seen this step.
constexpr uint64_t kKillAfterStep = 100;

constexpr char kJob[] = R"pb(
  name: "restart-bsp"
  model { mlp { input_dim: 784 hidden: 32 num_classes: 10 } }
  data {
    dataset: "synthetic"
    batch_size: 32
    epochs: 3
    synthetic_train: 8192
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
  // One directory for both shards: file names carry the shard id.
  o.psd_extra = "checkpoint_dir: \"ckpt\"";
  // Enough retries (backoff capped at 2 s) to outlast a restart.
  o.workerd_extra = "rpc_max_attempts: 30";
  return o;
}

struct RunResult {
  uint64_t checksum = 0;
  float test_accuracy = -1;
  uint64_t steps = 0;
  std::vector<JobStats> shard_stats;  // by shard
};

enum class Restart { kNone, kSamePort, kNewPort };

// Restarts shard 1, SIGKILLed, at a new port. Until it is up, its address
// file holds garbage: the coordinator must report it, not crash or forget
// the old address. Returns the new address in *address.
void RestartAtNewPort(LocalCluster& cluster, std::string* address) {
  const std::string file = cluster.dir() + "/s1.addr";
  ASSERT_TRUE(WriteFileAtomically(file, "garbage\n").ok());
  // The workers look for the silent shard at the coordinator, which then
  // reads the file (bounded poll of its log, one read per round).
  const std::string problem =
      absl::StrCat(file, ": \"garbage\" is not host:port");
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (cluster.Log("psd0").find(problem) == std::string::npos) {
    ASSERT_LT(absl::Now(), deadline) << "psd0 never reported " << problem;
  }
  // listen_address defaults to 127.0.0.1:0: any free port.
  absl::Status restarted = cluster.StartShard(1);
  ASSERT_TRUE(restarted.ok()) << restarted << cluster.Log("psd1");
  absl::StatusOr<std::string> a = WaitForFile(file, absl::Seconds(5));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_NE(*a, *address) << "the kernel gave the same port again";
  *address = *a;
}

// Submits the job; with a restart, SIGKILLs shard 1 once the job is past
// kKillAfterStep and restarts it (same or new port); waits for the end and
// reads every parameter back.
void TrainOnce(const std::string& name, Restart restart, RunResult* result) {
  const std::string dir = TestDir(name);
  LocalCluster cluster(dir, Options());
  ASSERT_TRUE(cluster.Start().ok());
  absl::StatusOr<std::string> submitted = SubmitJob(cluster, kJob);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const std::string& job = *submitted;
  absl::StatusOr<std::vector<std::string>> shard_addresses =
      ShardAddresses(cluster, 2);
  ASSERT_TRUE(shard_addresses.ok()) << shard_addresses.status();
  std::vector<std::string>& addresses = *shard_addresses;

  if (restart != Restart::kNone) {
    absl::StatusOr<JobStatus> mid = WaitForJob(
        cluster, job,
        [](const JobStatus& js) {
          return js.progress().step() >= kKillAfterStep;
        },
        absl::Seconds(240));
    ASSERT_TRUE(mid.ok()) << mid.status();
    ASSERT_EQ(mid->state(), RUNNING)
        << "the job ended before the kill: " << mid->reason();
    std::cout << "killing shard 1 at coordinator step "
              << mid->progress().step() << std::endl;
    cluster.shard(1).Kill();
    if (restart == Restart::kNewPort) {
      ASSERT_NO_FATAL_FAILURE(RestartAtNewPort(cluster, &addresses[1]));
    } else {
      absl::Status restarted = cluster.StartShard(
          1, absl::StrCat("listen_address: \"", addresses[1], "\""));
      ASSERT_TRUE(restarted.ok()) << restarted << cluster.Log("psd1");
    }
    // How long after the restart (the shard listening, its address file
    // written) the workers train again: two more steps reported.
    const absl::Time restarted_at = absl::Now();
    absl::StatusOr<JobStatus> now = ReadJobStatus(cluster, job);
    ASSERT_TRUE(now.ok()) << now.status();
    const uint64_t step = now->progress().step();
    absl::StatusOr<JobStatus> resumed = WaitForJob(
        cluster, job,
        [step](const JobStatus& js) {
          return js.progress().step() >= step + 2;
        },
        absl::Seconds(60));
    ASSERT_TRUE(resumed.ok()) << resumed.status() << cluster.Log("worker0");
    std::cout << "workers resumed (step " << step << " -> "
              << resumed->progress().step() << ") "
              << absl::FormatDuration(absl::Now() - restarted_at)
              << " after the restart" << std::endl;
  }

  absl::StatusOr<JobStatus> end = WaitForJob(
      cluster, job, [](const JobStatus&) { return false; }, absl::Seconds(400));
  ASSERT_TRUE(end.ok()) << end.status();
  ASSERT_EQ(end->state(), SUCCEEDED)
      << end->reason() << "\n--- psd1 ---\n"
      << cluster.Log("psd1") << "\n--- worker0 ---\n"
      << cluster.Log("worker0");
  result->steps = end->progress().step();
  result->test_accuracy = end->progress().test_accuracy();
  EXPECT_EQ(result->steps, kTotalSteps);

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

// The undisturbed run, trained once for every test.
const RunResult& Undisturbed() {
  static RunResult* calm = nullptr;
  if (calm != nullptr) return *calm;
  static RunResult result;
  TrainOnce("undisturbed", Restart::kNone, &result);
  if (!::testing::Test::HasFatalFailure()) calm = &result;
  return result;
}

void ExpectRestoredAndIdentical(const RunResult& calm,
                                const RunResult& killed) {
  const JobStats& restored = killed.shard_stats[1];
  std::cout << "shard 1 restored from step " << restored.restored_from_step()
            << ", then wrote " << restored.checkpoints()
            << " checkpoints; duplicates " << restored.duplicates()
            << ", stale " << restored.stale_pushes() << std::endl;
  EXPECT_GE(restored.restored_from_step(), kKillAfterStep);
  EXPECT_LT(restored.restored_from_step(), kTotalSteps);
  EXPECT_EQ(restored.version(), kTotalSteps);
  EXPECT_GT(restored.checkpoints(), 0u);
  EXPECT_EQ(killed.shard_stats[0].restored_from_step(), 0u);

  EXPECT_EQ(killed.checksum, calm.checksum)
      << "the restart changed the parameters";
  EXPECT_EQ(killed.test_accuracy, calm.test_accuracy);
}

TEST(ShardRestartTest, KilledShardRestoresAndTheJobEndsBitwiseIdentical) {
  const RunResult& calm = Undisturbed();
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  for (const JobStats& s : calm.shard_stats) {
    EXPECT_EQ(s.restored_from_step(), 0u);
    EXPECT_EQ(s.checkpoints(), kTotalSteps + 1);  // registration + every step
    EXPECT_EQ(s.version(), kTotalSteps);
  }
  RunResult killed;
  ASSERT_NO_FATAL_FAILURE(TrainOnce("killed", Restart::kSamePort, &killed));
  ExpectRestoredAndIdentical(calm, killed);
}

// Shards that move: the restarted shard listens on another port.
TEST(ShardRestartTest, ShardRestartedAtANewPortIsFoundAndTheJobEndsIdentical) {
  const RunResult& calm = Undisturbed();
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  RunResult moved;
  ASSERT_NO_FATAL_FAILURE(TrainOnce("moved", Restart::kNewPort, &moved));
  ExpectRestoredAndIdentical(calm, moved);
}

}  // namespace
}  // namespace ps
