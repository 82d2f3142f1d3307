// 3 psd + 2 workerd train a synthetic BSP job with replication: 2 and no
// checkpoints. In the middle of the run shard 1 (not the coordinator's) is
// killed with SIGKILL and never restarted: the coordinator misses its
// heartbeats, commits a new epoch and promotes shard 2, which holds the
// backups of shard 1's chunks; the workers find shard 2 through the
// coordinator and resend what was not answered with the same (worker,
// step). The job succeeds with parameters bitwise identical to an
// undisturbed run without replicas. Also: bad replication refused at
// submit naming the field.
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/text_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "tests/job_parameters.h"
#include "tests/local_cluster.h"
#include "tests/testing/cluster_fixture.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// 4096 examples / (2 workers x 32) = 64 steps per epoch, 192 in all. The
// coordinator's step trails the shards' by up to a report interval: the
// kill comes early enough that the job is still running on a loaded machine.
constexpr uint64_t kTotalSteps = 192;
constexpr uint64_t kKillAfterStep = 20;

struct RunResult {
  uint64_t checksum = 0;
  float test_accuracy = -1;
  std::vector<JobStats> shard_stats;  // by shard (1: its successor's)
  absl::Duration failover;            // kill to two more steps reported
};

// `extra`: more JobSpec text (e.g. a wire format).
void TrainOnce(const std::string& name, int replication, bool kill,
               RunResult* result, const std::string& extra = "") {
  LocalCluster cluster(TestDir(name), ThreeShardsOutlastingFailover());
  ASSERT_TRUE(cluster.Start().ok());
  absl::StatusOr<RunningJob> running = StartJobUntilStep(
      cluster, ReplicatedMlpJob("replicated-bsp", replication) + extra, 3,
      kill ? kKillAfterStep : 0, absl::Seconds(120));
  ASSERT_TRUE(running.ok()) << running.status();
  const std::string& job = running->id;
  const std::vector<std::string>& addresses = running->addresses;

  if (kill) {
    const uint64_t step = JobStep(cluster, job);
    // Failover time: from the kill until shard 2's lowest chunk version
    // (its promoted chunks included) is 2 past what it was before it: the
    // successor has applied a step on shard 1's chunks (bounded by one
    // Stats round trip of polling).
    absl::StatusOr<JobStats> before = ReadShardJobStats(addresses[2], job);
    ASSERT_TRUE(before.ok()) << before.status();
    ASSERT_LT(before->version(), kTotalSteps - 2)
        << "the job ran to its end before the kill (a machine too slow for "
           "this test's timing)";
    cluster.shard(1).Kill();
    const absl::Time killed_at = absl::Now();
    const absl::Time deadline = killed_at + absl::Seconds(60);
    while (true) {
      absl::StatusOr<JobStats> now = ReadShardJobStats(addresses[2], job);
      ASSERT_TRUE(now.ok()) << now.status();
      if (now->backup_chunks() == 0 &&
          now->version() >= before->version() + 2) {
        break;
      }
      ASSERT_LT(absl::Now(), deadline) << "shard 2 never took over\n"
                                       << cluster.Log("psd0");
    }
    result->failover = absl::Now() - killed_at;
    std::cout << "killed shard 1 at coordinator step " << step
              << " (shard 2 at version " << before->version()
              << "); shard 2 applied steps on its promoted chunks "
              << absl::FormatDuration(result->failover) << " after the kill"
              << std::endl;
  }

  absl::StatusOr<JobStatus> end = WaitForJob(
      cluster, job, [](const JobStatus&) { return false; }, absl::Seconds(240));
  ASSERT_TRUE(end.ok()) << end.status();
  ASSERT_EQ(end->state(), SUCCEEDED)
      << end->reason() << "\n--- psd0 ---\n"
      << cluster.Log("psd0") << "\n--- psd2 ---\n"
      << cluster.Log("psd2") << "\n--- worker0 ---\n"
      << cluster.Log("worker0");
  EXPECT_EQ(end->progress().step(), kTotalSteps);
  result->test_accuracy = end->progress().test_accuracy();

  std::vector<std::string> live = addresses;
  if (kill) {
    // Where the coordinator now sends shard 1's clients: its successor
    // (read back as shard 1 too).
    live[1] = addresses[2];
    ASSERT_TRUE(
        WriteFileAtomically(cluster.dir() + "/s1.addr", live[1] + "\n").ok());
  }
  absl::StatusOr<FinishedJob> finished = ReadFinishedJob(cluster, job, live);
  ASSERT_TRUE(finished.ok()) << finished.status();
  result->checksum = finished->checksum;
  result->shard_stats = finished->shard_stats;
  if (kill) {
    EXPECT_THAT(cluster.Log("psd0"),
                HasSubstr("shard 1 failed over at epoch 1"));
  }
  absl::Status stopped = cluster.Stop();
  // The killed shard exits by SIGKILL: Stop reports it.
  if (!kill) {
    EXPECT_TRUE(stopped.ok()) << stopped;
  }
}

TEST(ReplicatedShardTest, KilledPrimaryFailsOverAndTheJobEndsBitwiseIdentical) {
  RunResult calm;
  ASSERT_NO_FATAL_FAILURE(TrainOnce("undisturbed", 1, false, &calm));
  RunResult killed;
  ASSERT_NO_FATAL_FAILURE(TrainOnce("killed", 2, true, &killed));
  EXPECT_EQ(killed.checksum, calm.checksum)
      << "the failover changed the parameters";
  EXPECT_EQ(killed.test_accuracy, calm.test_accuracy);
  // Shard 0 lost its backup (shard 1) and says so; shard 2 serves shard
  // 1's chunks as well as its own, at the last step, under epoch 1.
  const JobStats& s0 = killed.shard_stats[0];
  const JobStats& s2 = killed.shard_stats[2];
  EXPECT_GE(s0.replica_drops(), 1u);
  EXPECT_EQ(s0.replica_epoch(), 1u);
  EXPECT_EQ(s2.replica_epoch(), 1u);
  EXPECT_EQ(s2.backup_chunks(), 0u);
  EXPECT_EQ(s2.version(), kTotalSteps);
}

// Top-k pushes (delta pulls): the successor never answered the workers, so
// its first answers carry whole chunks; the workers' residuals stay with
// their clients. Bitwise as an undisturbed top-k run.
TEST(ReplicatedShardTest, ATopKJobFailsOverBitwiseIdentical) {
  const std::string topk = "wire { topk_fraction: 0.1 }\n";
  RunResult calm;
  ASSERT_NO_FATAL_FAILURE(TrainOnce("topk-undisturbed", 1, false, &calm, topk));
  RunResult killed;
  ASSERT_NO_FATAL_FAILURE(TrainOnce("topk-killed", 2, true, &killed, topk));
  EXPECT_EQ(killed.checksum, calm.checksum)
      << "the failover changed the parameters";
  EXPECT_EQ(killed.test_accuracy, calm.test_accuracy);
  EXPECT_EQ(killed.shard_stats[2].replica_epoch(), 1u);
}

TEST(ReplicatedShardTest, BadReplicationIsRefusedAndDryRunShowsTheCopies) {
  LocalClusterOptions o = ThreeShardsOutlastingFailover();
  o.workers = 0;
  LocalCluster cluster(TestDir("refused"), o);
  ASSERT_TRUE(cluster.Start().ok());
  for (const auto& [k, why] : std::vector<std::pair<int, std::string>>{
           {4, "replication: must be in [1, 3], got 4"}}) {
    absl::StatusOr<std::string> job =
        SubmitJob(cluster, ReplicatedMlpJob("replicated-bsp", k));
    ASSERT_FALSE(job.ok());
    EXPECT_THAT(job.status().message(), HasSubstr(why));
  }
  // A dry run shows each shard's primary and backup bytes.
  const std::string file = cluster.dir() + "/dry.pbtxt";
  ASSERT_TRUE(
      WriteFileAtomically(file, ReplicatedMlpJob("replicated-bsp", 2)).ok());
  absl::StatusOr<CommandResult> dry =
      cluster.Psctl({"submit", file, "--dry-run"});
  ASSERT_TRUE(dry.ok()) << dry.status();
  EXPECT_THAT(dry->out, HasSubstr("2 copies each"));
  EXPECT_THAT(dry->out, HasSubstr("bytes backup"));
  std::cout << dry->out;
  EXPECT_TRUE(cluster.Stop().ok());
}

}  // namespace
}  // namespace ps
