// psctl scale --drain on real processes (issue 29): a synthetic BSP MLP job
// on all 3 shards has shard 1 drained mid-job (its chunks move to shards 0
// and 2 at a step boundary; the workers follow the new placement), as an
// operator would before taking that server node down, and then shard 1's
// psd is stopped. The job ends SUCCEEDED with parameters bitwise equal to
// an undisturbed run, shard 1 holding none of its chunks. Bad input exits 2
// naming why and changes nothing.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "tests/checksum.h"
#include "tests/job_parameters.h"
#include "tests/local_cluster.h"
#include "tests/testing/cluster_fixture.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// 4096 examples / (2 workers x 32) = 64 steps per epoch; a few hundred
// steps a second on 2 cores with 3 shards, so the drain lands mid-job.
constexpr int kEpochs = 60;
constexpr uint64_t kTotalSteps = 64 * kEpochs;

// psctl scale JOB --drain=IDS: exit code and output.
CommandResult Drain(LocalCluster& cluster, const std::string& job,
                    const std::string& ids) {
  absl::StatusOr<CommandResult> r = ScaleShards(cluster, job, "--drain=" + ids);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : CommandResult();
}

// Bad input after the drain: refused naming why, exit 2.
void ExpectRefusals(LocalCluster& cluster, const std::string& job) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"5", "drain: shard 5 is past the cluster's 3 shards"},
      {"1", "drain: job " + job + " does not use shard 1"},
      {"0,2", "drain: [0, 2] is every shard job " + job + " uses"},
      {"x", "--drain=K[,K2...]"},
  };
  for (const auto& [ids, want] : cases) {
    CommandResult r = Drain(cluster, job, ids);
    EXPECT_EQ(r.exit_code, 2) << ids << ": " << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr(want)) << ids;
  }
}

uint64_t TrainOnce(const std::string& name, bool drain) {
  LocalCluster cluster(TestDir(name), ThreeShards());
  EXPECT_TRUE(cluster.Start().ok());
  absl::StatusOr<RunningJob> running =
      StartJobUntilStep(cluster, ReplicatedMlpJob("drain", 1, kEpochs, 2000), 3,
                        drain ? 40 : 0, absl::Seconds(120));
  EXPECT_TRUE(running.ok()) << running.status();
  if (!running.ok()) return 0;
  const std::string& job = running->id;
  if (drain) {
    const ReshardStatus drained = MoveAndAwait(cluster, job, "--drain=1");
    EXPECT_EQ(drained.phase(), "done");
    EXPECT_EQ(drained.epoch(), 1u);
    EXPECT_GT(drained.moved_chunks(), 0u);
    ExpectRefusals(cluster, job);
    absl::StatusOr<CommandResult> status = cluster.Psctl({"status", job});
    EXPECT_TRUE(status.ok());
    if (status.ok()) {
      EXPECT_THAT(status->out, HasSubstr("shards: [0 1 2] -> [0 2], done"));
    }
    absl::StatusOr<JobStats> left =
        ReadShardJobStats(running->addresses[1], job);
    EXPECT_TRUE(left.ok()) << left.status();
    if (left.ok()) {
      EXPECT_EQ(left->chunks(), 0u);
    }
    // The maintenance the drain was for: shard 1's psd goes down (SIGTERM,
    // a clean stop) while the job trains on without it.
    absl::StatusOr<int> stopped = cluster.shard(1).Stop(absl::Seconds(10));
    EXPECT_TRUE(stopped.ok() && *stopped == 0) << stopped.status();
  }
  absl::StatusOr<JobStatus> end =
      AwaitSuccess(cluster, job, absl::Seconds(240));
  if (!end.ok()) return 0;
  EXPECT_EQ(end->progress().step(), kTotalSteps);
  // Shard 1 is down after a drain: the parameters come from 0 and 2 (the
  // placement names no chunk on 1).
  std::vector<std::string> serving = running->addresses;
  if (drain) serving[1] = "";
  absl::StatusOr<JobParameters> finished =
      ReadJobParameters(cluster, job, serving);
  EXPECT_TRUE(finished.ok()) << finished.status();
  if (drain && finished.ok()) {
    EXPECT_THAT(cluster.Log("worker0"), HasSubstr("re-placed"));
    EXPECT_THAT(finished->status.spec().shard_ids(),
                ::testing::ElementsAre(0, 2));
    for (int s : {0, 2}) {
      absl::StatusOr<JobStats> stats =
          ReadShardJobStats(running->addresses[s], job);
      EXPECT_TRUE(stats.ok()) << stats.status();
      if (stats.ok()) {
        EXPECT_GT(stats->chunks(), 0u) << "shard " << s;
      }
    }
  }
  EXPECT_TRUE(cluster.Stop().ok());
  return finished.ok() ? ParamChecksum(finished->values) : 0;
}

TEST(ReshardDrainTest, DrainingTheMiddleShardEndsBitwiseAsAnUndisturbedRun) {
  const uint64_t calm = TrainOnce("undisturbed", false);
  ASSERT_NE(calm, 0u);
  const uint64_t drained = TrainOnce("drained", true);
  EXPECT_EQ(drained, calm);
}

}  // namespace
}  // namespace ps
