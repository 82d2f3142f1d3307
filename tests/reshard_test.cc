// psctl scale --shards on real processes (issue 29): a synthetic BSP MLP job
// submitted on 2 of 3 shards (no checkpoints) grows onto the third shard
// mid-job and shrinks back to 2; each move pauses the job at a step
// boundary, copies the chunks that move and commits the new placement, and
// the workers resume on it. The job ends SUCCEEDED with parameters bitwise
// equal to an undisturbed run on 2 shards. Bad input exits 2 naming why and
// changes nothing.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "tests/local_cluster.h"
#include "tests/testing/cluster_fixture.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// 4096 examples / (2 workers x 32) = 64 steps per epoch; about 600 steps
// a second on 2 cores, so the moves land mid-job.
constexpr int kEpochs = 150;
constexpr uint64_t kTotalSteps = 64 * kEpochs;

std::string Job() {
  return absl::StrCat(ReplicatedMlpJob("reshard", 1, kEpochs, 2000),
                      "shards: 2\n");
}

// psctl scale JOB --shards=N: exit code and output.
CommandResult Scale(LocalCluster& cluster, const std::string& job,
                    const std::string& shards) {
  absl::StatusOr<CommandResult> r =
      ScaleShards(cluster, job, "--shards=" + shards);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : CommandResult();
}

uint64_t TrainOnce(const std::string& name, bool move) {
  LocalCluster cluster(TestDir(name), ThreeShards());
  EXPECT_TRUE(cluster.Start().ok());
  absl::StatusOr<RunningJob> running =
      StartJobUntilStep(cluster, Job(), 3, move ? 40 : 0, absl::Seconds(120));
  EXPECT_TRUE(running.ok()) << running.status();
  if (!running.ok()) return 0;
  const std::string& job = running->id;
  if (move) {
    const ReshardStatus grown = MoveAndAwait(cluster, job, "--shards=3");
    EXPECT_EQ(grown.phase(), "done");
    EXPECT_EQ(grown.epoch(), 1u);
    EXPECT_GT(grown.moved_chunks(), 0u);
    // Bad input: refused, naming why; nothing changes.
    CommandResult r = Scale(cluster, job, "4");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("shards: 4 is outside [1, 3]"));
    r = Scale(cluster, "job-000042", "2");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("job-000042"));
    RunFor(cluster, job, 300);
    const ReshardStatus shrunk = MoveAndAwait(cluster, job, "--shards=2");
    EXPECT_EQ(shrunk.phase(), "done");
    EXPECT_EQ(shrunk.epoch(), 2u);
    absl::StatusOr<CommandResult> status = cluster.Psctl({"status", job});
    EXPECT_TRUE(status.ok());
    if (status.ok()) {
      EXPECT_THAT(status->out, HasSubstr("shards: 3 -> 2, done"));
    }
  }
  absl::StatusOr<JobStatus> end =
      AwaitSuccess(cluster, job, absl::Seconds(240));
  if (!end.ok()) return 0;
  EXPECT_EQ(end->progress().step(), kTotalSteps);
  if (move) {
    EXPECT_THAT(cluster.Log("worker0"), HasSubstr("re-placed"));
  }
  absl::StatusOr<FinishedJob> finished =
      ReadFinishedJob(cluster, job, running->addresses);
  EXPECT_TRUE(finished.ok()) << finished.status();
  EXPECT_TRUE(cluster.Stop().ok());
  return finished.ok() ? finished->checksum : 0;
}

TEST(ReshardTest, GrowsToThreeShardsAndBackBitwiseAsAnUndisturbedRun) {
  const uint64_t calm = TrainOnce("undisturbed", false);
  ASSERT_NE(calm, 0u);
  const uint64_t moved = TrainOnce("moved", true);
  EXPECT_EQ(moved, calm);
}

}  // namespace
}  // namespace ps
