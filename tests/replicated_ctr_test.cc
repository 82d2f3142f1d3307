// 3 psd + 2 workerd train the CTR workload (a sparse table "emb" and a
// dense MLP, BSP) with replication: 2 and no checkpoints. Mid-job one
// shard that is not the coordinator's is killed with SIGKILL and never
// restarted: the coordinator promotes the next shard of the ring, which
// holds the backup of the killed shard's dense chunks and of its table
// rows (server/internal/table_replicas.h); the workers find it through the
// coordinator and resend what was not answered, naming the rows' shard
// (SparseExchangeRequest.table_shard). The job succeeds with dense
// parameters bitwise equal to an undisturbed run without replicas, and
// the same test AUC and logloss, which read every table row: no
// acknowledged update of the rows was lost or applied twice. Run twice,
// killing shard 1, then shard 2.
#include <cstdint>
#include <iostream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/text_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "tests/local_cluster.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/ctr_job.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

constexpr int kShards = 3;
// 131072 examples / (2 workers x 256) = 256 steps: the kill comes with
// many steps left even when the coordinator reports progress late.
constexpr uint64_t kTotalSteps = 256;
constexpr uint64_t kKillAfterStep = 20;
// The tests that restart a shard: long enough for the restart and a kill.
constexpr uint64_t kLongSteps = 768;

// `steps`: of 2 workers x 256 examples.
std::string Job(int replication, uint64_t steps = kTotalSteps) {
  CtrJob job;
  job.name = "replicated-ctr";
  job.hidden = {32};
  job.synthetic_train = steps * 2 * 256;
  job.synthetic_test = 4096;
  job.extra = absl::StrCat("replication: ", replication);
  return CtrJobSpec(job);
}

LocalClusterOptions Options(const std::string& psd_extra = "") {
  LocalClusterOptions o;
  o.shards = kShards;
  o.psd_extra = psd_extra;
  // Enough retries (backoff capped at 2 s) to outlast the failover.
  o.workerd_extra = "rpc_max_attempts: 30";
  return o;
}

struct RunResult {
  uint64_t checksum = 0;
  double auc = -1;
  double logloss = -1;
  std::vector<JobStats> shard_stats;  // by shard (the killed: its successor)
};

// Waits for `job` to succeed after `steps` steps and reads it from `live`
// (by shard: the address that serves each shard's copies now; written to
// the address files of shards 1.. for the read).
void Finish(LocalCluster& cluster, const std::string& job, uint64_t steps,
            const std::vector<std::string>& live, RunResult* result) {
  absl::StatusOr<JobStatus> end = WaitForJob(
      cluster, job, [](const JobStatus&) { return false; }, absl::Seconds(240),
      WhileUnreachable::kRetry);
  ASSERT_TRUE(end.ok()) << end.status();
  ASSERT_EQ(end->state(), SUCCEEDED)
      << end->reason() << "\n--- psd0 ---\n"
      << cluster.Log("psd0") << "\n--- psd1 ---\n"
      << cluster.Log("psd1") << "\n--- psd2 ---\n"
      << cluster.Log("psd2") << "\n--- worker0 ---\n"
      << cluster.Log("worker0");
  EXPECT_EQ(end->progress().step(), steps);
  result->auc = end->progress().test_auc();
  result->logloss = end->progress().test_logloss();
  // Not psd 0's: psctl finds the coordinator through it.
  for (int s = 1; s < kShards; ++s) {
    ASSERT_TRUE(
        WriteFileAtomically(absl::StrCat(cluster.dir(), "/s", s, ".addr"),
                            live[s] + "\n")
            .ok());
  }
  absl::StatusOr<FinishedJob> finished = ReadFinishedJob(cluster, job, live);
  ASSERT_TRUE(finished.ok()) << finished.status();
  result->checksum = finished->checksum;
  result->shard_stats = finished->shard_stats;
}

// `killed`: the shard to kill (-1: none); its successor is the next shard.
void TrainOnce(const std::string& name, int replication, int killed,
               RunResult* result) {
  LocalCluster cluster(TestDir(name), Options());
  ASSERT_TRUE(cluster.Start().ok());
  absl::StatusOr<RunningJob> running =
      StartJobUntilStep(cluster, Job(replication), kShards,
                        killed >= 0 ? kKillAfterStep : 0, absl::Seconds(120));
  ASSERT_TRUE(running.ok()) << running.status();
  const std::string& job = running->id;
  std::vector<std::string> live = running->addresses;
  const int successor = (killed + 1) % kShards;  // on the ring

  if (killed >= 0) {
    live[killed] = running->addresses[successor];
    const uint64_t step = JobStep(cluster, job);
    ASSERT_LT(step, kTotalSteps - 10)
        << "the job ran to its end before the kill (a machine too slow for "
           "this test's timing)";
    cluster.shard(killed).Kill();
    std::cout << "killed shard " << killed << " at coordinator step " << step
              << std::endl;
  }

  ASSERT_NO_FATAL_FAILURE(Finish(cluster, job, kTotalSteps, live, result));
  if (killed >= 0) {
    EXPECT_THAT(
        cluster.Log("psd0"),
        HasSubstr(absl::StrCat("shard ", killed, " failed over at epoch 1")));
  }
  absl::Status stopped = cluster.Stop();
  if (killed < 0) {
    EXPECT_TRUE(stopped.ok()) << stopped;
  }
}

// (the shard killed, the copies): with 3 copies the successor forwards
// shard 1's rows on to the last backup (shard 0), which may lack the last
// step the dead primary forwarded to the successor only: it gets the state.
class ReplicatedCtrTest
    : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(ReplicatedCtrTest, KilledShardFailsOverWithItsTableRows) {
  const auto [killed, copies] = GetParam();
  // The undisturbed run, once for every kill.
  static RunResult* const calm_run = new RunResult;
  RunResult& calm = *calm_run;
  if (calm.auc < 0) {
    ASSERT_NO_FATAL_FAILURE(TrainOnce("calm", 1, -1, &calm));
  }
  RunResult run;
  ASSERT_NO_FATAL_FAILURE(TrainOnce(
      absl::StrCat("killed", killed, "-k", copies), copies, killed, &run));
  EXPECT_EQ(run.checksum, calm.checksum)
      << "the failover changed the dense parameters";
  // Evaluated on rows read from every shard (the successor's copy for the
  // killed shard's): equal only if every row is.
  EXPECT_EQ(run.auc, calm.auc);
  EXPECT_EQ(run.logloss, calm.logloss);
  const JobStats& s = run.shard_stats[(killed + 1) % kShards];
  EXPECT_EQ(s.replica_epoch(), 1u);
  std::cout << "auc " << run.auc << " logloss " << run.logloss
            << "; successor tables at version " << s.tables_version()
            << std::endl;
}

INSTANTIATE_TEST_SUITE_P(EachNonCoordinatorShard, ReplicatedCtrTest,
                         ::testing::Values(std::make_tuple(1, 2),
                                           std::make_tuple(2, 2),
                                           std::make_tuple(1, 3)));

// Re-replication: shard 1 is killed and restarted on its port; it rejoins
// empty and the acting primaries copy its replicas in, table rows
// included (the state, then the steps made meanwhile); once it is caught
// up, shard 2 is killed: shard 1's rows then have no other copy than the
// one it was sent (shard 2 served them since the first kill), and shard
// 2's are served by shard 0. Bitwise as an undisturbed run.
// The undisturbed run of `steps` steps without replicas (once per test
// binary).
void LongCalm(RunResult* calm) {
  static RunResult* const cached = new RunResult;
  if (cached->auc < 0) {
    LocalCluster cluster(TestDir("long-calm"), Options());
    ASSERT_TRUE(cluster.Start().ok());
    absl::StatusOr<RunningJob> running = StartJobUntilStep(
        cluster, Job(1, kLongSteps), kShards, 0, absl::Seconds(120));
    ASSERT_TRUE(running.ok()) << running.status();
    ASSERT_NO_FATAL_FAILURE(
        Finish(cluster, running->id, kLongSteps, running->addresses, cached));
    EXPECT_TRUE(cluster.Stop().ok());
  }
  *calm = *cached;
}

TEST(ReplicatedCtrTest, ARejoinedShardsCopiedRowsServeAfterTheNextKill) {
  constexpr uint64_t kSteps = kLongSteps;
  RunResult calm;
  ASSERT_NO_FATAL_FAILURE(LongCalm(&calm));
  // 20 misses of 100 ms: the restart is noticed by its new incarnation.
  LocalCluster cluster(TestDir("rejoin"),
                       Options("shard_heartbeat_misses: 20"));
  ASSERT_TRUE(cluster.Start().ok());
  absl::StatusOr<RunningJob> running = StartJobUntilStep(
      cluster, Job(2, kSteps), kShards, kKillAfterStep, absl::Seconds(120));
  ASSERT_TRUE(running.ok()) << running.status();
  const std::string& job = running->id;
  const std::vector<std::string>& a = running->addresses;
  cluster.shard(1).Kill();
  const absl::Time restarted_at = absl::Now();
  absl::Status restarted =
      cluster.StartShard(1, absl::StrCat("listen_address: \"", a[1], "\""));
  ASSERT_TRUE(restarted.ok()) << restarted << cluster.Log("psd1");
  absl::Status caught_up =
      AwaitLog(cluster, "psd0", "shard 1 caught up: a backup again at epoch 3",
               absl::Seconds(60));
  ASSERT_TRUE(caught_up.ok()) << caught_up;
  const uint64_t step = JobStep(cluster, job);
  std::cout << "shard 1 restarted, rejoined and caught up in "
            << absl::FormatDuration(absl::Now() - restarted_at)
            << " (job at step " << step << ")" << std::endl;
  ASSERT_LT(step + 50, kSteps) << "too few steps left for the second kill";
  absl::Status failed = KillAndAwaitFailover(cluster, 2, 4, absl::Seconds(30));
  ASSERT_TRUE(failed.ok()) << failed;
  RunResult run;
  ASSERT_NO_FATAL_FAILURE(
      Finish(cluster, job, kSteps, {a[0], a[1], a[0]}, &run));
  cluster.Stop().IgnoreError();  // shard 2 exits by SIGKILL
  EXPECT_EQ(run.checksum, calm.checksum) << "the rejoined copy was not exact";
  EXPECT_EQ(run.auc, calm.auc);
  EXPECT_EQ(run.logloss, calm.logloss);
}

// The coordinator's own psd (shard 0) is killed and restarted on its port
// (the coordinator's state in state_dir): it fails its own empty shard
// over at once, shard 0's rows and chunks are served by shard 1, and
// shard 0 rejoins and is copied in, table rows included. Bitwise as an
// undisturbed run.
TEST(ReplicatedCtrTest, TheCoordinatorsShardRestartsAndItsRowsAreKept) {
  RunResult calm;
  ASSERT_NO_FATAL_FAILURE(LongCalm(&calm));
  LocalCluster cluster(TestDir("coordinator"), Options("state_dir: \"state\""));
  ASSERT_TRUE(cluster.Start().ok());
  absl::StatusOr<RunningJob> running = StartJobUntilStep(
      cluster, Job(2, kLongSteps), kShards, kKillAfterStep, absl::Seconds(120));
  ASSERT_TRUE(running.ok()) << running.status();
  const std::vector<std::string>& a = running->addresses;
  std::cout << "killing psd 0 (coordinator and shard 0) at step "
            << JobStep(cluster, running->id) << std::endl;
  cluster.shard(0).Kill();
  absl::Status restarted =
      cluster.StartShard(0, absl::StrCat("listen_address: \"", a[0], "\""));
  ASSERT_TRUE(restarted.ok()) << restarted << cluster.Log("psd0");
  absl::Status caught_up = AwaitLog(
      cluster, "psd0", "coordinator: shard 0 caught up", absl::Seconds(120));
  ASSERT_TRUE(caught_up.ok()) << caught_up;
  RunResult run;
  ASSERT_NO_FATAL_FAILURE(
      Finish(cluster, running->id, kLongSteps, {a[1], a[1], a[2]}, &run));
  EXPECT_THAT(cluster.Log("psd0"),
              HasSubstr("its own shard 0 restarted empty"));
  cluster.Stop().IgnoreError();
  EXPECT_EQ(run.checksum, calm.checksum) << "shard 0's copies were not exact";
  EXPECT_EQ(run.auc, calm.auc);
  EXPECT_EQ(run.logloss, calm.logloss);
}

}  // namespace
}  // namespace ps
