// A replicated job on some of the cluster's shards (docs/OPERATIONS.md
// "Replication"): 3 psd + 2 workerd train a synthetic BSP job with
// replication: 2 and no checkpoints whose chunks sit on two of the three
// shards, so its backups follow the ring over those two, not the cluster's.
// One of its shards is SIGKILLed mid-job and never restarted: its chunks
// must be served by the shard that holds their backups (the other shard of
// the job), not by its next shard in the cluster, which holds none of them.
// The job ends SUCCEEDED with parameters bitwise identical to an
// undisturbed run without replicas.
//
// FirstShards: `shards: 2` (shards 0 and 1), shard 1 killed: served by
// shard 0 (the cluster's next shard, 2, holds nothing of the job).
// ExplicitSet: `shard_ids: [1, 2]`, shard 2 killed: served by shard 1 (the
// cluster's next shard, 0, holds nothing of the job).
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "tests/checksum.h"
#include "tests/job_parameters.h"
#include "tests/local_cluster.h"
#include "tests/testing/cluster_fixture.h"

namespace ps {
namespace {

// 4096 examples / (2 workers x 32) = 64 steps per epoch, 192 in all.
constexpr uint64_t kTotalSteps = 192;
constexpr uint64_t kKillAfterStep = 20;

// Trains the job (`shard_set`: its JobSpec shard fields) with `replication`
// copies; kills shard `kill` (< 0: none) after kKillAfterStep and reads the
// parameters from `survivor` in its place. The parameters' checksum.
void TrainOnce(const std::string& name, const std::string& shard_set,
               int replication, int kill, int survivor, uint64_t* checksum) {
  LocalCluster cluster(TestDir(name), ThreeShardsOutlastingFailover());
  ASSERT_TRUE(cluster.Start().ok());
  absl::StatusOr<RunningJob> running = StartJobUntilStep(
      cluster, ReplicatedMlpJob("subset", replication) + shard_set, 3,
      kill >= 0 ? kKillAfterStep : 0, absl::Seconds(120));
  ASSERT_TRUE(running.ok()) << running.status();
  const std::string& job = running->id;
  if (kill >= 0) {
    absl::Status failed_over =
        KillAndAwaitFailover(cluster, kill, 1, absl::Seconds(60));
    ASSERT_TRUE(failed_over.ok()) << failed_over;
    std::cout << "killed shard " << kill << " at coordinator step "
              << JobStep(cluster, job) << std::endl;
  }
  absl::StatusOr<JobStatus> end = WaitForJob(
      cluster, job, [](const JobStatus&) { return false; }, absl::Seconds(240));
  ASSERT_TRUE(end.ok()) << end.status();
  ASSERT_EQ(end->state(), SUCCEEDED)
      << end->reason() << "\n--- psd0 ---\n"
      << cluster.Log("psd0") << "\n--- worker0 ---\n"
      << cluster.Log("worker0");
  EXPECT_EQ(end->progress().step(), kTotalSteps);
  std::vector<std::string> live = running->addresses;
  if (kill >= 0) live[kill] = running->addresses[survivor];
  absl::StatusOr<JobParameters> params = ReadJobParameters(cluster, job, live);
  ASSERT_TRUE(params.ok()) << params.status();
  *checksum = ParamChecksum(params->values);
  if (kill >= 0) {
    // The survivor served the killed shard's chunks to the end.
    absl::StatusOr<JobStats> stats =
        ReadShardJobStats(running->addresses[survivor], job);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->backup_chunks(), 0u);
    EXPECT_EQ(stats->replica_epoch(), 1u);
    EXPECT_EQ(stats->version(), kTotalSteps);
  }
  absl::Status stopped = cluster.Stop();
  // The killed shard exits by SIGKILL: Stop reports it.
  if (kill < 0) {
    EXPECT_TRUE(stopped.ok()) << stopped;
  }
}

// The undisturbed run without replicas, trained once for both tests.
uint64_t Calm() {
  static const uint64_t calm = [] {
    uint64_t checksum = 0;
    TrainOnce("undisturbed", "shards: 2\n", 1, -1, -1, &checksum);
    return checksum;
  }();
  return calm;
}

TEST(ReplicatedSubsetTest, FirstShardsFailOverOntoTheirBackups) {
  const uint64_t calm = Calm();
  ASSERT_NE(calm, 0u);
  uint64_t killed = 0;
  ASSERT_NO_FATAL_FAILURE(
      TrainOnce("first-shards", "shards: 2\n", 2, 1, 0, &killed));
  EXPECT_EQ(killed, calm) << "the failover changed the parameters";
}

TEST(ReplicatedSubsetTest, AnExplicitSetFailsOverOntoItsBackups) {
  const uint64_t calm = Calm();
  ASSERT_NE(calm, 0u);
  uint64_t killed = 0;
  ASSERT_NO_FATAL_FAILURE(TrainOnce(
      "explicit-set", "shard_ids: 1\nshard_ids: 2\n", 2, 2, 1, &killed));
  EXPECT_EQ(killed, calm) << "the failover changed the parameters";
}

}  // namespace
}  // namespace ps
