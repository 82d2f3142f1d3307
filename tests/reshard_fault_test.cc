// A shard killed in the middle of `psctl scale --shards` (issue 29), on real
// processes: a synthetic BSP MLP job with a checkpoint every step runs on 2
// of 3 shards (psd0 also runs the coordinator). To hold a move between its
// pause and its copy without timing, worker 1 is stopped (SIGSTOP) just
// before the command: the job pauses two steps ahead and cannot reach that
// step, so the move waits there for its quiesce, where the test kills a
// shard (SIGKILL). The move must abort, the live shards lift the pause, and
// the job goes on once the shard is back:
//   1. the shard the chunks were to move to (psd2) dies: aborted; restarted;
//   2. a shard that holds chunks (psd1) dies: aborted; restarted, it
//      restores its checkpoint and the workers resend what it lost;
//   3. psd0 dies, the coordinator with its shard (a coordinator restart in
//      the middle of a move): restarted, the coordinator finds the move in
//      its store, not committed, and aborts it on every shard;
//   4. a fourth move, undisturbed, completes on the restarted shards.
// Nothing is lost or applied twice: the job ends SUCCEEDED at its full step
// count with parameters bitwise equal to an undisturbed run's.
//
// A second case kills a shard after the coordinator's store committed a
// move and before that shard's COMMIT (psd1 with testing_kill_at_commit_
// epoch: it SIGKILLs itself as the COMMIT arrives): the move rolls forward.
// psd1, restarted from its files, comes back paused with the job it
// prepared, the coordinator's COMMIT sent again installs it, and the move
// ends "done" naming psd1 late; the job ends SUCCEEDED, bitwise equal to the
// same undisturbed run.
#include <signal.h>

#include <cstdint>
#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "tests/local_cluster.h"
#include "tests/testing/cluster_fixture.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// 4096 examples / (2 workers x 32) = 64 steps per epoch.
constexpr int kEpochs = 40;
constexpr uint64_t kTotalSteps = 64 * kEpochs;

std::string Job() {
  return absl::StrCat(ReplicatedMlpJob("reshard-fault", 1, kEpochs, 2000),
                      "shards: 2\ncheckpoint { every_steps: 1 }\n");
}

LocalClusterOptions Options() {
  LocalClusterOptions o;
  o.shards = 3;
  // One folder for every shard: file names carry the shard id.
  // psd0's coordinator keeps its jobs (and a move) in state_dir's store.
  o.psd_extra = "checkpoint_dir: \"ckpt\"\nstate_dir: \"state\"";
  // Retries (backoff capped at 2 s) that outlast a restart.
  o.workerd_extra = "rpc_max_attempts: 30";
  // Worker 1 stays stopped for a moment; it must not count as lost.
  o.worker_timeout_ms = 20000;
  return o;
}

// Waits until the job's move to `shards` shards is no longer in progress
// (or, with `pausing`, until it paused and waits for the quiesce).
ReshardStatus AwaitMove(LocalCluster& cluster, const std::string& job,
                        bool pausing) {
  JobStatus last;
  absl::StatusOr<JobStatus> s = WaitForJob(
      cluster, job,
      [pausing](const JobStatus& js) {
        return pausing ? js.reshard().phase() == "pausing"
                       : MoveEnded(js.reshard());
      },
      absl::Seconds(60), WhileUnreachable::kRetry, &last);
  EXPECT_TRUE(s.ok()) << s.status() << "\n" << cluster.Log("psd0");
  return last.reshard();
}

void Scale(LocalCluster& cluster, const std::string& job, int shards) {
  absl::StatusOr<CommandResult> r =
      ScaleShards(cluster, job, absl::StrCat("--shards=", shards));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << r->out << r->err;
}

// Restarts shard `s` on its port, from its checkpoints.
void Restart(LocalCluster& cluster, const RunningJob& job, int s) {
  absl::Status restarted = cluster.StartShard(
      s, absl::StrCat("listen_address: \"", job.addresses[s], "\""));
  ASSERT_TRUE(restarted.ok())
      << restarted << cluster.Log(absl::StrCat("psd", s));
}

// Moves the job to 3 shards with worker 1 stopped, kills `victim` while the
// move waits for its quiesce, and checks the move aborted; the victim is
// restarted on its port (psd0, which runs the coordinator, at once: the
// coordinator it restarts finds the move in its store, not committed, and
// aborts it). Then worker 1 goes on.
void KillDuringMove(LocalCluster& cluster, const RunningJob& job, int victim) {
  Subprocess& stopped = cluster.worker(1);
  ASSERT_EQ(kill(stopped.pid(), SIGSTOP), 0);
  Scale(cluster, job.id, 3);
  const ReshardStatus paused = AwaitMove(cluster, job.id, /*pausing=*/true);
  ASSERT_EQ(paused.phase(), "pausing") << paused.ShortDebugString();
  std::cout << "killing psd" << victim
            << " in the move's quiesce: " << paused.ShortDebugString()
            << std::endl;
  cluster.shard(victim).Kill();
  if (victim == 0) Restart(cluster, job, 0);
  const ReshardStatus aborted = AwaitMove(cluster, job.id, /*pausing=*/false);
  std::cout << "move with psd" << victim
            << " killed: " << aborted.ShortDebugString() << std::endl;
  EXPECT_THAT(
      aborted.phase(),
      StartsWith(victim == 0 ? std::string("aborted")
                             : absl::StrCat("aborted: shard ", victim)));
  if (victim != 0) Restart(cluster, job, victim);
  ASSERT_EQ(kill(stopped.pid(), SIGCONT), 0);
  // Training goes on at the old placement.
  RunFor(cluster, job.id, 40);
}

// The job's parameters once it SUCCEEDED on `cluster` (0 on a failure).
uint64_t FinishedChecksum(LocalCluster& cluster, const RunningJob& running) {
  absl::StatusOr<JobStatus> end =
      AwaitSuccess(cluster, running.id, absl::Seconds(240));
  if (!end.ok()) return 0;
  EXPECT_EQ(end->progress().step(), kTotalSteps);
  absl::StatusOr<FinishedJob> finished =
      ReadFinishedJob(cluster, running.id, running.addresses);
  EXPECT_TRUE(finished.ok()) << finished.status();
  EXPECT_TRUE(cluster.Stop().ok());
  return finished.ok() ? finished->checksum : 0;
}

uint64_t TrainOnce(const std::string& name, bool faults) {
  LocalCluster cluster(TestDir(name), Options());
  EXPECT_TRUE(cluster.Start().ok());
  absl::StatusOr<RunningJob> running =
      StartJobUntilStep(cluster, Job(), 3, faults ? 40 : 0, absl::Seconds(120));
  EXPECT_TRUE(running.ok()) << running.status();
  if (!running.ok()) return 0;
  const std::string& job = running->id;
  if (faults) {
    KillDuringMove(cluster, *running, 2);
    if (::testing::Test::HasFailure()) return 0;
    KillDuringMove(cluster, *running, 1);
    if (::testing::Test::HasFailure()) return 0;
    KillDuringMove(cluster, *running, 0);
    if (::testing::Test::HasFailure()) return 0;
    const ReshardStatus grown = MoveAndAwait(cluster, job, "--shards=3");
    EXPECT_EQ(grown.phase(), "done") << grown.ShortDebugString();
    EXPECT_GT(grown.moved_chunks(), 0u);
  }
  if (faults) {
    EXPECT_THAT(cluster.Log("psd0"), HasSubstr("aborted"));
  }
  return FinishedChecksum(cluster, *running);
}

// The undisturbed run's parameters, trained once for both cases.
uint64_t Undisturbed() {
  static const uint64_t calm = TrainOnce("undisturbed", false);
  return calm;
}

// psd1 dies at the COMMIT of the move to 3 shards (placement epoch 1) and
// is restarted on its port; the move must end done on every shard.
uint64_t TrainKilledAtCommit() {
  LocalCluster cluster(TestDir("killed-at-commit"), Options());
  EXPECT_TRUE(cluster.WriteClusterFile().ok());
  for (int s = 0; s < 3; ++s) {
    const absl::Status started =
        cluster.StartShard(s, s == 1 ? "testing_kill_at_commit_epoch: 1" : "");
    EXPECT_TRUE(started.ok()) << started;
  }
  for (int w = 0; w < 2; ++w) EXPECT_TRUE(cluster.StartWorker(w).ok());
  absl::StatusOr<RunningJob> running =
      StartJobUntilStep(cluster, Job(), 3, 40, absl::Seconds(120));
  EXPECT_TRUE(running.ok()) << running.status();
  if (!running.ok()) return 0;
  Scale(cluster, running->id, 3);
  const absl::StatusOr<int> died = cluster.shard(1).Wait(absl::Seconds(60));
  EXPECT_TRUE(died.ok()) << "psd1 is still running: " << died.status();
  if (!died.ok()) return 0;
  EXPECT_EQ(*died, 128 + SIGKILL);
  std::cout << "psd1 died at the COMMIT; restarting it" << std::endl;
  Restart(cluster, *running, 1);
  const ReshardStatus moved =
      AwaitMove(cluster, running->id, /*pausing=*/false);
  std::cout << "move with psd1 killed at its COMMIT: "
            << moved.ShortDebugString() << std::endl;
  EXPECT_EQ(moved.phase(), "done");
  EXPECT_THAT(moved.late_shards(), ElementsAre(1u));
  EXPECT_THAT(cluster.Log("psd1"),
              HasSubstr("placement epoch 1 prepared before the restart"));
  return FinishedChecksum(cluster, *running);
}

TEST(ReshardFaultTest, AShardKilledInAMoveAbortsItAndLosesNothing) {
  const uint64_t calm = Undisturbed();
  ASSERT_NE(calm, 0u);
  const uint64_t faulted = TrainOnce("faulted", true);
  EXPECT_EQ(faulted, calm);
}

TEST(ReshardFaultTest, AShardKilledAtItsCommitCommitsLateAndLosesNothing) {
  const uint64_t calm = Undisturbed();
  ASSERT_NE(calm, 0u);
  EXPECT_EQ(TrainKilledAtCommit(), calm);
}

}  // namespace
}  // namespace ps
