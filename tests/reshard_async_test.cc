// psctl scale --shards of an ASP job, and of an SSP one, on real processes
// (issue 29): 3 psd + 2 workerd, the job on 2 of the shards, grown onto the
// third mid-job and shrunk back. Their pause refuses every push; the
// workers retry, follow the new placement and send the refused step again,
// and a chunk that took it before the pause drops it as a duplicate (its
// dedupe state moves with it).
//
// The count: under ASP and SSP a chunk's version counts the pushes applied
// to it, and every worker pushes every chunk each step, so with nothing
// lost and nothing applied twice every chunk ends at version 2 workers x
// the steps of each.
#include <cstdint>
#include <iostream>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "tests/job_parameters.h"
#include "tests/local_cluster.h"
#include "tests/testing/cluster_fixture.h"

namespace ps {
namespace {

constexpr uint32_t kWorkers = 2;
// 4096 examples / (2 workers x 32): 64 steps per worker and epoch.
constexpr uint64_t kEpochs = 40;
constexpr uint64_t kStepsPerWorker = 64 * kEpochs;

class ReshardAsyncTest : public ::testing::TestWithParam<AsyncMode> {};

INSTANTIATE_TEST_SUITE_P(Modes, ReshardAsyncTest,
                         ::testing::ValuesIn(AsyncModes()), AsyncModeName);

TEST_P(ReshardAsyncTest, EveryPushAppliesOnceAcrossTwoMoves) {
  LocalCluster cluster(TestDir(GetParam().name), ThreeShards());
  ASSERT_TRUE(cluster.Start().ok());
  absl::StatusOr<RunningJob> job =
      StartJobUntilStep(cluster,
                        AsyncMlpJob("reshard-async", GetParam().consistency,
                                    kEpochs, "shards: 2"),
                        3, 60, absl::Seconds(120));
  ASSERT_TRUE(job.ok()) << job.status();
  const ReshardStatus grown = MoveAndAwait(cluster, job->id, "--shards=3");
  EXPECT_EQ(grown.phase(), "done");
  EXPECT_GT(grown.moved_chunks(), 0u);
  RunFor(cluster, job->id, 100);
  if (HasFailure()) return;
  const ReshardStatus shrunk = MoveAndAwait(cluster, job->id, "--shards=2");
  EXPECT_EQ(shrunk.phase(), "done");

  absl::StatusOr<JobStatus> end =
      AwaitSuccess(cluster, job->id, absl::Seconds(300));
  ASSERT_TRUE(end.ok() && end->state() == SUCCEEDED);
  EXPECT_NE(cluster.Log("worker0").find("re-placed"), std::string::npos);

  const uint64_t applied = kWorkers * kStepsPerWorker;
  std::map<uint32_t, uint64_t> versions;
  for (int s : {0, 1}) {
    absl::Status read = ReadServedVersions(job->addresses[s], job->id,
                                           shrunk.epoch(), &versions);
    ASSERT_TRUE(read.ok()) << read;
  }
  ASSERT_EQ(versions.size(),
            static_cast<size_t>(end->placement().chunks_size()));
  for (const auto& [chunk, version] : versions) {
    EXPECT_EQ(version, applied)
        << "chunk " << chunk << ": applied updates != the workers' steps ("
        << (version < applied ? "lost" : "applied twice") << ")";
  }
  if (HasFailure()) {
    for (const char* name : {"worker0", "worker1", "psd0", "psd1", "psd2"}) {
      std::cout << "--- " << name << " ---\n" << cluster.Log(name) << "\n";
    }
  }
  std::cout << versions.size() << " chunks, each at version " << applied
            << " = " << kWorkers << " workers x " << kStepsPerWorker << " steps"
            << std::endl;
  EXPECT_TRUE(cluster.Stop().ok());
}

}  // namespace
}  // namespace ps
