// Replicated shards that come back (docs/OPERATIONS.md "Replication"):
// psd processes and workerd train a synthetic BSP job with replication and
// no checkpoints.
//
// PrimaryRestartedOnItsPortRejoinsAndLaterTakesOver (3 shards, k = 2):
// shard 1 is SIGKILLed and restarted at once on the same port, before it
// could miss its way out of the heartbeats: it answers the coordinator as
// a new process (another incarnation) and is failed over for that at
// once, and until the coordinator names it, the workers that reach it get
// UNAVAILABLE for the job it no longer holds and retry (not a "no job"
// that fails the job). It serves nothing (the coordinator registers the
// job on it afresh and it joins as a backup), copies its replicas from
// shards 0 and 2 while training goes on, and becomes a backup once caught
// up. Then shard 2 is SIGKILLed: shard 1 serves its own chunks again from
// the copy and shard 0 serves shard 2's. The job ends SUCCEEDED bitwise
// identical to an undisturbed run without replicas: the rejoined copy was
// exact.
//
// APrimaryLostDuringTheCopy (4 shards, k = 3): shard 1 is SIGKILLed and
// restarted while shard 2, the acting primary of its chunks, is frozen
// (SIGSTOP): shard 1 is joining when shard 2 is failed over, copies from
// shard 3 instead, and the job still ends bitwise identical.
#include <signal.h>

#include <cstdint>
#include <iostream>
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

// 4096 examples / (2 workers x 32) = 64 steps per epoch. A step takes a
// few ms on an idle machine: enough of them that the job still runs after
// a restart and a rejoin (about a second).
constexpr uint64_t kEpochs = 40;
constexpr uint64_t kTotalSteps = 64 * kEpochs;
constexpr uint64_t kKillAfterStep = 30;

LocalClusterOptions Options(int shards, const std::string& psd_extra = "") {
  LocalClusterOptions o;
  o.shards = shards;
  o.psd_extra = psd_extra;
  // Enough retries (backoff capped at 2 s) to outlast the failovers.
  o.workerd_extra = "rpc_max_attempts: 30";
  return o;
}

// The coordinator's (psd0) log gets `line` within `timeout`.
void ExpectLog(const LocalCluster& cluster, const std::string& line,
               absl::Duration timeout) {
  absl::Status st = AwaitLog(cluster, "psd0", line, timeout);
  ASSERT_TRUE(st.ok()) << st;
}

// Waits for the job to reach `step`, asserting it still runs.
uint64_t AwaitStep(const LocalCluster& cluster, const std::string& job,
                   uint64_t step) {
  absl::StatusOr<JobStatus> s = WaitForJob(
      cluster, job,
      [step](const JobStatus& js) { return js.progress().step() >= step; },
      absl::Seconds(120));
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return 0;
  EXPECT_EQ(s->state(), RUNNING) << "the job ended too early: " << s->reason();
  return s->progress().step();
}

// Restarts the SIGKILLed shard `s` on a new port (as under a scheduler;
// the coordinator finds it through its address file): the workers' retries
// to the old address fail at once and they find the acting primary.
// Returns the new address in *address.
void Restart(LocalCluster& cluster, int s, std::string* address) {
  const std::string file = absl::StrCat(cluster.dir(), "/s", s, ".addr");
  ASSERT_TRUE(WriteFileAtomically(file, "").ok());
  absl::Status restarted = cluster.StartShard(s);
  ASSERT_TRUE(restarted.ok())
      << restarted << cluster.Log(absl::StrCat("psd", s));
  absl::StatusOr<std::string> a = WaitForFile(file, absl::Seconds(10));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_NE(*a, *address) << "the kernel gave the same port again";
  *address = *a;
}

// Restarts the SIGKILLed shard `s` on the port it had (`address`).
void RestartOnItsPort(LocalCluster& cluster, int s,
                      const std::string& address) {
  absl::Status restarted =
      cluster.StartShard(s, absl::StrCat("listen_address: \"", address, "\""));
  ASSERT_TRUE(restarted.ok())
      << restarted << cluster.Log(absl::StrCat("psd", s));
}

// Shard `s` holds every chunk of `job` it has a copy of as a backup and
// took no push: it is not a primary.
void ExpectServesNothing(const std::string& address, const std::string& job,
                         int s) {
  absl::StatusOr<JobStats> st = ReadShardJobStats(address, job);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->backup_chunks(), st->chunks()) << "shard " << s;
  EXPECT_EQ(st->pushes(), 0u) << "shard " << s;
}

struct RunResult {
  uint64_t checksum = 0;
  float test_accuracy = -1;
};

// Waits for the end, SUCCEEDED, and reads the parameters through
// `live` (by shard: where its chunks are served now).
void Finish(LocalCluster& cluster, const std::string& job,
            const std::vector<std::string>& live, RunResult* result) {
  absl::StatusOr<JobStatus> end = WaitForJob(
      cluster, job, [](const JobStatus&) { return false; }, absl::Seconds(300));
  ASSERT_TRUE(end.ok()) << end.status();
  ASSERT_EQ(end->state(), SUCCEEDED)
      << end->reason() << "\n--- psd0 ---\n"
      << cluster.Log("psd0") << "\n--- psd1 ---\n"
      << cluster.Log("psd1") << "\n--- worker0 ---\n"
      << cluster.Log("worker0");
  EXPECT_EQ(end->progress().step(), kTotalSteps);
  result->test_accuracy = end->progress().test_accuracy();
  for (size_t s = 0; s < live.size(); ++s) {
    ASSERT_TRUE(
        WriteFileAtomically(absl::StrCat(cluster.dir(), "/s", s, ".addr"),
                            live[s] + "\n")
            .ok());
  }
  absl::StatusOr<FinishedJob> finished = ReadFinishedJob(cluster, job, live);
  ASSERT_TRUE(finished.ok()) << finished.status();
  result->checksum = finished->checksum;
  (void)cluster.Stop();  // the killed shards exit by SIGKILL: reported
}

void Undisturbed(int shards, RunResult* result) {
  LocalCluster cluster(TestDir(absl::StrCat("undisturbed", shards)),
                       Options(shards));
  ASSERT_TRUE(cluster.Start().ok());
  absl::StatusOr<std::string> job = SubmitJob(
      cluster, ReplicatedMlpJob("replicated-rejoin", 1, kEpochs, 200));
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<std::vector<std::string>> addresses =
      ShardAddresses(cluster, shards);
  ASSERT_TRUE(addresses.ok()) << addresses.status();
  ASSERT_NO_FATAL_FAILURE(Finish(cluster, *job, *addresses, result));
}

TEST(ReplicatedRejoinTest, PrimaryRestartedOnItsPortRejoinsAndLaterTakesOver) {
  RunResult calm;
  ASSERT_NO_FATAL_FAILURE(Undisturbed(3, &calm));

  // 20 misses of 100 ms: the restarted shard answers long before it could
  // be failed over for silence; only its new incarnation gives it away.
  LocalCluster cluster(TestDir("rejoin"),
                       Options(3, "shard_heartbeat_misses: 20"));
  ASSERT_TRUE(cluster.Start().ok());
  absl::StatusOr<RunningJob> running = StartJobUntilStep(
      cluster, ReplicatedMlpJob("replicated-rejoin", 2, kEpochs, 200), 3,
      kKillAfterStep, absl::Seconds(120));
  ASSERT_TRUE(running.ok()) << running.status();
  const std::string& job = running->id;
  std::vector<std::string>& a = running->addresses;
  cluster.shard(1).Kill();
  const absl::Time restarted_at = absl::Now();
  ASSERT_NO_FATAL_FAILURE(RestartOnItsPort(cluster, 1, a[1]));
  ASSERT_NO_FATAL_FAILURE(ExpectLog(cluster, "shard 1 answers as a new process",
                                    absl::Seconds(30)));
  ASSERT_NO_FATAL_FAILURE(
      ExpectLog(cluster, "shard 1 failed over at epoch 1", absl::Seconds(30)));
  ASSERT_NO_FATAL_FAILURE(ExpectLog(
      cluster, "shard 1 answers again: it rejoins as a backup at epoch 2",
      absl::Seconds(30)));
  ASSERT_NO_FATAL_FAILURE(
      ExpectLog(cluster, "shard 1 caught up: a backup again at epoch 3",
                absl::Seconds(60)));
  const absl::Duration rejoin = absl::Now() - restarted_at;
  // Refused as a primary: the workers never reached it; it holds a copy of
  // every chunk it had, all as a backup, each copied in.
  ASSERT_NO_FATAL_FAILURE(ExpectServesNothing(a[1], job, 1));
  absl::StatusOr<JobStats> s1 = ReadShardJobStats(a[1], job);
  ASSERT_TRUE(s1.ok()) << s1.status();
  EXPECT_EQ(s1->replica_copied_chunks(), s1->backup_chunks());
  EXPECT_FALSE(s1->replica_joining());
  EXPECT_EQ(s1->replica_epoch(), 3u);
  absl::StatusOr<CommandResult> stats = cluster.Psctl({"stats"});
  ASSERT_TRUE(stats.ok()) << stats.status();
  std::cout << stats->out;
  const uint64_t caught_at = JobStep(cluster, job);
  std::cout << "shard 1 restarted on its port, failed over, rejoined and "
               "caught up in "
            << absl::FormatDuration(rejoin) << " (job at step " << caught_at
            << ")" << std::endl;

  // A few steps acknowledged with shard 1 in the set, then its copies are
  // the only ones of shard 2's... and of its own chunks.
  AwaitStep(cluster, job, caught_at + 10);
  ASSERT_FALSE(::testing::Test::HasFailure());
  absl::Status failed = KillAndAwaitFailover(cluster, 2, 4, absl::Seconds(30));
  ASSERT_TRUE(failed.ok()) << failed;
  RunResult killed;
  ASSERT_NO_FATAL_FAILURE(Finish(cluster, job, {a[0], a[1], a[0]}, &killed));
  EXPECT_EQ(killed.checksum, calm.checksum)
      << "the rejoined copy was not exact";
  EXPECT_EQ(killed.test_accuracy, calm.test_accuracy);
}

TEST(ReplicatedRejoinTest, APrimaryLostDuringTheCopy) {
  RunResult calm;
  ASSERT_NO_FATAL_FAILURE(Undisturbed(4, &calm));

  // A frozen shard is failed over after 10 heartbeats of 100 ms, each
  // waiting 1 s for it: shard 1 is back well before.
  LocalCluster cluster(TestDir("lost-during-copy"),
                       Options(4, "shard_heartbeat_misses: 10"));
  ASSERT_TRUE(cluster.Start().ok());
  absl::StatusOr<RunningJob> running = StartJobUntilStep(
      cluster, ReplicatedMlpJob("replicated-rejoin", 3, kEpochs, 200), 4,
      kKillAfterStep, absl::Seconds(120));
  ASSERT_TRUE(running.ok()) << running.status();
  const std::string& job = running->id;
  std::vector<std::string>& a = running->addresses;
  absl::Status failed = KillAndAwaitFailover(cluster, 1, 1, absl::Seconds(30));
  ASSERT_TRUE(failed.ok()) << failed;
  // Shard 2 (acting primary of shard 1's chunks) freezes; shard 1 comes
  // back and joins while shard 2 cannot copy to it, and is still joining
  // when shard 2 is failed over (a silent shard holds back the catch-up).
  ASSERT_EQ(kill(cluster.shard(2).pid(), SIGSTOP), 0);
  ASSERT_NO_FATAL_FAILURE(Restart(cluster, 1, &a[1]));
  ASSERT_NO_FATAL_FAILURE(ExpectLog(
      cluster, "shard 1 answers again: it rejoins as a backup at epoch 2",
      absl::Seconds(30)));
  ASSERT_NO_FATAL_FAILURE(
      ExpectLog(cluster, "shard 2 failed over at epoch 3", absl::Seconds(30)));
  EXPECT_EQ(cluster.Log("psd0").find("shard 1 caught up: a backup again at "
                                     "epoch 3"),
            std::string::npos);
  cluster.shard(2).Kill();
  // Shard 3 is the acting primary of shard 1's and shard 2's chunks now
  // and copies them to shard 1.
  ASSERT_NO_FATAL_FAILURE(
      ExpectLog(cluster, "shard 1 caught up: a backup again at epoch 4",
                absl::Seconds(60)));
  ASSERT_NO_FATAL_FAILURE(ExpectServesNothing(a[1], job, 1));
  RunResult killed;
  ASSERT_NO_FATAL_FAILURE(
      Finish(cluster, job, {a[0], a[3], a[3], a[3]}, &killed));
  EXPECT_EQ(killed.checksum, calm.checksum)
      << "the copy made during the failover was not exact";
  EXPECT_EQ(killed.test_accuracy, calm.test_accuracy);
}

}  // namespace
}  // namespace ps
