// psctl scale --shards of a replicated job on real processes (issue 29): a
// synthetic BSP MLP with `replication: 2` submitted on 2 of 3 shards grows
// onto the third, shrinks back to 2, grows to 3 again and has shard 1
// drained (psctl scale --drain=1) mid-job; each move carries every copy
// (primary and backup) onto the ring over the new shards. Then shard 2 is
// killed: on the ring over [0, 2] its backups are on shard 0, which takes
// over. The job ends SUCCEEDED with parameters bitwise equal to an
// undisturbed k = 2 run on 2 shards.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/text_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "tests/local_cluster.h"
#include "tests/testing/cluster_fixture.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// 64 steps an epoch (ReplicatedMlpJob): the moves and the kill land
// mid-job.
constexpr int kEpochs = 40;
constexpr uint64_t kTotalSteps = 64 * kEpochs;

std::string Job() {
  return absl::StrCat(ReplicatedMlpJob("reshard-replicated", 2, kEpochs, 2000),
                      "shards: 2\n");
}

// `psctl scale JOB ARG`; the move must complete at `epoch`.
void Move(const LocalCluster& cluster, const std::string& job,
          const std::string& arg, uint64_t epoch) {
  const ReshardStatus r = MoveAndAwait(cluster, job, arg);
  EXPECT_EQ(r.phase(), "done") << cluster.Log("psd0");
  EXPECT_EQ(r.epoch(), epoch);
  EXPECT_GT(r.moved_chunks(), 0u);
}

uint64_t TrainOnce(const std::string& name, bool move) {
  LocalCluster cluster(TestDir(name), ThreeShardsOutlastingFailover());
  EXPECT_TRUE(cluster.Start().ok());
  absl::StatusOr<RunningJob> running =
      StartJobUntilStep(cluster, Job(), 3, move ? 40 : 0, absl::Seconds(120));
  EXPECT_TRUE(running.ok()) << running.status();
  if (!running.ok()) return 0;
  const std::string& job = running->id;
  std::vector<std::string> live = running->addresses;
  if (move) {
    Move(cluster, job, "--shards=3", 1);
    RunFor(cluster, job, 150);
    Move(cluster, job, "--shards=2", 2);
    RunFor(cluster, job, 150);
    Move(cluster, job, "--shards=3", 3);
    RunFor(cluster, job, 100);
    Move(cluster, job, "--drain=1", 4);
    RunFor(cluster, job, 50);
    EXPECT_LT(JobStep(cluster, job), kTotalSteps - 200)
        << "the job is nearly done before the kill (a machine too slow "
           "for this test's timing)";
    // On the ring over [0, 2] shard 2's chunks have their backups on
    // shard 0.
    const absl::Status failed =
        KillAndAwaitFailover(cluster, 2, 1, absl::Seconds(30));
    EXPECT_TRUE(failed.ok()) << failed;
    live[2] = live[0];  // shard 2's chunks read back from its successor
    EXPECT_TRUE(
        WriteFileAtomically(cluster.dir() + "/s2.addr", live[2] + "\n").ok());
  }
  absl::StatusOr<JobStatus> end =
      AwaitSuccess(cluster, job, absl::Seconds(240));
  if (!end.ok()) return 0;
  EXPECT_EQ(end->progress().step(), kTotalSteps);
  if (move) {
    EXPECT_THAT(cluster.Log("worker0"), HasSubstr("re-placed"));
    EXPECT_THAT(cluster.Log("psd2"), HasSubstr("committed placement epoch 4"));
  }
  absl::StatusOr<FinishedJob> finished = ReadFinishedJob(cluster, job, live);
  EXPECT_TRUE(finished.ok()) << finished.status();
  const absl::Status stopped = cluster.Stop();
  if (!move) {
    EXPECT_TRUE(stopped.ok()) << stopped;  // the killed shard: not OK
  }
  return finished.ok() ? finished->checksum : 0;
}

TEST(ReshardReplicatedTest, MovesThenFailsOverBitwiseAsAnUndisturbedRun) {
  const uint64_t calm = TrainOnce("undisturbed", false);
  ASSERT_NE(calm, 0u);
  const uint64_t moved = TrainOnce("moved", true);
  EXPECT_EQ(moved, calm);
}

}  // namespace
}  // namespace ps
