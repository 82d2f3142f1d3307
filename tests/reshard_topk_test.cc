// psctl scale --shards of a job that pushes top-k gradients (wire
// topk_fraction < 1, error feedback), on real processes (issue 29): 3 psd +
// 2 workerd, the job on 2 of the shards, grown onto the third mid-job and
// shrunk back. A worker's top-k residuals are client state, not shard
// state: the client that follows the new placement takes over its
// predecessor's encoder (PsClientOptions::encoder), and the refused step it
// sends again is encoded once (GradientEncoder::EncodeStep).
//
// BSP: the job ends SUCCEEDED with parameters bitwise equal to an
// undisturbed run (a residual lost or a step encoded twice changes them).
// ASP: every chunk ends at version 2 workers x the steps of each (each push
// applied once).
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "tests/job_parameters.h"
#include "tests/local_cluster.h"
#include "tests/testing/cluster_fixture.h"

namespace ps {
namespace {

constexpr const char* kTopk = "wire { topk_fraction: 0.1 }\n";
// 4096 examples / (2 workers x 32) = 64 steps per epoch.
constexpr int kEpochs = 40;
constexpr uint64_t kSteps = 64 * kEpochs;

// Runs the job (moved 2 -> 3 -> 2 shards when `move`) to the end; the
// running job and its end, or nothing after a failure (reported).
struct Ended {
  RunningJob job;
  JobStatus end;
  uint64_t epoch = 0;  // the placement epoch it ended on
};
std::optional<Ended> RunJob(LocalCluster& cluster, const std::string& spec,
                            bool move) {
  absl::StatusOr<RunningJob> job =
      StartJobUntilStep(cluster, spec, 3, move ? 40 : 0, absl::Seconds(120));
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return std::nullopt;
  Ended out{*job, {}, 0};
  if (move) {
    const ReshardStatus grown = MoveAndAwait(cluster, job->id, "--shards=3");
    EXPECT_EQ(grown.phase(), "done");
    EXPECT_GT(grown.moved_chunks(), 0u);
    RunFor(cluster, job->id, 200);
    const ReshardStatus shrunk = MoveAndAwait(cluster, job->id, "--shards=2");
    EXPECT_EQ(shrunk.phase(), "done");
    out.epoch = shrunk.epoch();
  }
  absl::StatusOr<JobStatus> end =
      AwaitSuccess(cluster, job->id, absl::Seconds(240));
  EXPECT_TRUE(end.ok()) << end.status();
  if (!end.ok()) return std::nullopt;
  if (move) {
    EXPECT_NE(cluster.Log("worker0").find("re-placed"), std::string::npos);
    EXPECT_EQ(cluster.Log("worker0").find("residuals start from zero"),
              std::string::npos);
  }
  out.end = *end;
  return out;
}

uint64_t BspChecksum(const std::string& name, bool move) {
  LocalCluster cluster(TestDir(name), ThreeShards());
  EXPECT_TRUE(cluster.Start().ok());
  const std::string spec = absl::StrCat(
      ReplicatedMlpJob("reshard-topk", 1, kEpochs, 2000), "shards: 2\n", kTopk);
  std::optional<Ended> ended = RunJob(cluster, spec, move);
  uint64_t checksum = 0;
  if (ended) {
    EXPECT_EQ(ended->end.progress().step(), kSteps);
    absl::StatusOr<FinishedJob> finished =
        ReadFinishedJob(cluster, ended->job.id, ended->job.addresses);
    EXPECT_TRUE(finished.ok()) << finished.status();
    if (finished.ok()) checksum = finished->checksum;
  }
  EXPECT_TRUE(cluster.Stop().ok());
  return checksum;
}

TEST(ReshardTopkTest, BspMovesBitwiseAsAnUndisturbedRun) {
  const uint64_t calm = BspChecksum("bsp_undisturbed", false);
  ASSERT_NE(calm, 0u);
  EXPECT_EQ(BspChecksum("bsp_moved", true), calm);
}

TEST(ReshardTopkTest, AspPushesApplyOnceAcrossTwoMoves) {
  LocalCluster cluster(TestDir("asp"), ThreeShards());
  ASSERT_TRUE(cluster.Start().ok());
  const std::string spec = AsyncMlpJob("reshard-topk-asp", "mode: ASP", kEpochs,
                                       absl::StrCat("shards: 2\n", kTopk));
  std::optional<Ended> ended = RunJob(cluster, spec, true);
  ASSERT_TRUE(ended.has_value());
  std::map<uint32_t, uint64_t> versions;
  for (int s : {0, 1}) {
    absl::Status read = ReadServedVersions(
        ended->job.addresses[s], ended->job.id, ended->epoch, &versions);
    ASSERT_TRUE(read.ok()) << read;
  }
  ASSERT_EQ(versions.size(),
            static_cast<size_t>(ended->end.placement().chunks_size()));
  for (const auto& [chunk, version] : versions) {
    EXPECT_EQ(version, 2 * kSteps) << "chunk " << chunk;
  }
  EXPECT_TRUE(cluster.Stop().ok());
}

}  // namespace
}  // namespace ps
