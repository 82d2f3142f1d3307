// The CTR workload (a sparse table over 5 psd, 2 workerd, BSP, a checkpoint
// every step) with shard 4 killed with SIGKILL mid-run and restarted on the
// same port. The model's 4 dense tensors are one chunk each, on shards 0-3:
// shard 4 holds table rows only, so no dense answer waits for its
// checkpoints, and only the reply gate over the tables keeps the workers
// from holding a table version it can lose. With it, the restored tables are
// at the workers' step or one ahead, their retries are accepted or stale,
// the job succeeds, and it ends bitwise the same (dense parameters, test AUC
// and logloss, which read every table row) as an undisturbed run. Without
// it, the workers were usually a step past the restored tables and the job
// failed ("step: N is ahead of the sparse tables' step N-1 ...").
// tables_full_every: 100 makes every tables checkpoint after the first an
// increment, so the restart restores the tables through a chain of
// increments (server/checkpoint.h), which must give them exactly.
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "tests/local_cluster.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/ctr_job.h"

namespace ps {
namespace {

// 81920 examples / (2 workers x 256) = 160 steps: on a quiet machine a
// 40-step job could end within one status poll, before the kill.
constexpr uint64_t kTotalSteps = 160;
// The last shard dies once the coordinator has seen this step.
constexpr uint64_t kKillAfterStep = 15;
constexpr int kShards = 5;
constexpr int kKilled = kShards - 1;

std::string RestartJob() {
  CtrJob job;
  job.name = "ctr-restart";
  job.hidden = {32};
  job.synthetic_train = 81920;
  job.synthetic_test = 4096;
  job.extra = "checkpoint { every_steps: 1 tables_full_every: 100 }";
  return CtrJobSpec(job);
}

LocalClusterOptions Options() {
  LocalClusterOptions o;
  o.shards = kShards;
  // 5 psd writing a checkpoint every step beside 2 workers on a loaded
  // machine: a worker's heartbeat may be starved for seconds.
  o.worker_timeout_ms = 30000;
  o.psd_extra = "checkpoint_dir: \"ckpt\"";
  // Enough retries (backoff capped at 2 s) to outlast a restart.
  o.workerd_extra = "rpc_max_attempts: 30";
  return o;
}

struct RunResult {
  uint64_t checksum = 0;
  double auc = -1;
  double logloss = -1;
  std::vector<JobStats> shard_stats;  // by shard
};

void TrainOnce(const std::string& name, bool kill, RunResult* result) {
  LocalCluster cluster(TestDir(name), Options());
  ASSERT_TRUE(cluster.Start().ok());
  absl::StatusOr<std::string> submitted = SubmitJob(cluster, RestartJob());
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const std::string& job = *submitted;
  absl::StatusOr<std::vector<std::string>> addresses =
      ShardAddresses(cluster, kShards);
  ASSERT_TRUE(addresses.ok()) << addresses.status();

  if (kill) {
    absl::StatusOr<JobStatus> mid = WaitForJob(
        cluster, job,
        [](const JobStatus& js) {
          return js.progress().step() >= kKillAfterStep;
        },
        absl::Seconds(240));
    ASSERT_TRUE(mid.ok()) << mid.status();
    ASSERT_EQ(mid->state(), RUNNING)
        << "the job ended before the kill: " << mid->reason();
    std::cout << "killing shard " << kKilled << " at coordinator step "
              << mid->progress().step() << std::endl;
    cluster.shard(kKilled).Kill();
    absl::Status restarted = cluster.StartShard(
        kKilled,
        absl::StrCat("listen_address: \"", (*addresses)[kKilled], "\""));
    ASSERT_TRUE(restarted.ok())
        << restarted << cluster.Log(absl::StrCat("psd", kKilled));
  }

  absl::StatusOr<JobStatus> end = WaitForJob(
      cluster, job, [](const JobStatus&) { return false; }, absl::Seconds(400));
  ASSERT_TRUE(end.ok()) << end.status();
  ASSERT_EQ(end->state(), SUCCEEDED)
      << end->reason() << "\n--- psd" << kKilled << " ---\n"
      << cluster.Log(absl::StrCat("psd", kKilled)) << "\n--- worker0 ---\n"
      << cluster.Log("worker0");
  EXPECT_EQ(end->progress().step(), kTotalSteps);
  result->auc = end->progress().test_auc();
  result->logloss = end->progress().test_logloss();
  absl::StatusOr<FinishedJob> finished =
      ReadFinishedJob(cluster, job, *addresses);
  ASSERT_TRUE(finished.ok()) << finished.status();
  result->checksum = finished->checksum;
  result->shard_stats = finished->shard_stats;
  absl::Status stopped = cluster.Stop();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

TEST(CtrRestartTest, KilledShardRestoresItsTablesAndTheJobEndsIdentical) {
  RunResult calm;
  ASSERT_NO_FATAL_FAILURE(TrainOnce("ctr_calm", /*kill=*/false, &calm));
  RunResult killed;
  ASSERT_NO_FATAL_FAILURE(TrainOnce("ctr_killed", /*kill=*/true, &killed));

  // The killed shard holds rows only (the test's premise).
  ASSERT_EQ(calm.shard_stats.size(), static_cast<size_t>(kShards));
  for (int s = 0; s < kKilled; ++s) EXPECT_EQ(calm.shard_stats[s].chunks(), 1u);
  EXPECT_EQ(calm.shard_stats[kKilled].chunks(), 0u);
  EXPECT_GT(calm.shard_stats[kKilled].tables_version(), 0u);

  const JobStats& restored = killed.shard_stats[kKilled];
  std::cout << "shard " << kKilled << " restored from step "
            << restored.restored_from_step() << ", tables at version "
            << restored.tables_version() << "; duplicates "
            << restored.duplicates() << ", stale " << restored.stale_pushes()
            << std::endl;
  EXPECT_GE(restored.restored_from_step(), kKillAfterStep);
  EXPECT_EQ(restored.tables_version(), kTotalSteps);
  for (int s = 0; s < kKilled; ++s) {
    EXPECT_EQ(killed.shard_stats[s].restored_from_step(), 0u);
  }
  EXPECT_EQ(killed.checksum, calm.checksum)
      << "the restart changed the dense parameters";
  EXPECT_EQ(killed.auc, calm.auc) << "the restart changed the tables";
  EXPECT_EQ(killed.logloss, calm.logloss);
}

}  // namespace
}  // namespace ps
