// An ASP job, and an SSP one, with replication: 2 and no checkpoints on 3
// psd + 2 workerd (docs/OPERATIONS.md "Replication"). A push is acknowledged to
// its worker only once every live backup holds the applied update and the
// (worker, step) dedupe state. Mid-job shard 1 (a primary) is SIGKILLed: shard
// 2 takes its chunks over, the workers resend what was not acknowledged with
// the same (worker, step), and the job ends SUCCEEDED.
//
// The count: under ASP and SSP every push of a worker's step applies once to
// each chunk (a chunk's version counts the updates applied to it), so with no
// acknowledged update lost and none applied twice every chunk, read from
// the shard that serves it at the end, is at version sum over workers of
// the steps each worker had acknowledged (all of its steps: the job
// succeeded).
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "proto/ps.pb.h"
#include "tests/job_parameters.h"
#include "tests/local_cluster.h"
#include "tests/testing/cluster_fixture.h"

namespace ps {
namespace {

constexpr int kShards = 3;
constexpr uint32_t kWorkers = 2;
// 4096 examples / (2 workers x 32): 64 steps per worker and epoch.
constexpr uint64_t kEpochs = 12;
constexpr uint64_t kStepsPerWorker = 64 * kEpochs;
constexpr uint64_t kKillAfterStep = 60;

class ReplicatedAsyncTest : public ::testing::TestWithParam<AsyncMode> {};

INSTANTIATE_TEST_SUITE_P(Modes, ReplicatedAsyncTest,
                         ::testing::ValuesIn(AsyncModes()), AsyncModeName);

TEST_P(ReplicatedAsyncTest, KilledPrimaryLosesNoAcknowledgedPush) {
  LocalClusterOptions o;
  o.shards = kShards;
  // Enough retries (backoff capped at 2 s) to outlast the failover.
  o.workerd_extra = "rpc_max_attempts: 30";
  LocalCluster cluster(TestDir(absl::StrCat(GetParam().name, "-killed")), o);
  ASSERT_TRUE(cluster.Start().ok());
  absl::StatusOr<RunningJob> job =
      StartJobUntilStep(cluster,
                        AsyncMlpJob("replicated-async", GetParam().consistency,
                                    kEpochs, "replication: 2"),
                        kShards, kKillAfterStep, absl::Seconds(120));
  ASSERT_TRUE(job.ok()) << job.status();
  const absl::Time killed_at = absl::Now();
  absl::Status failed_over =
      KillAndAwaitFailover(cluster, 1, 1, absl::Seconds(30));
  ASSERT_TRUE(failed_over.ok()) << failed_over;
  std::cout << "shard 1 killed at step >= " << kKillAfterStep
            << ", failed over after "
            << absl::FormatDuration(absl::Now() - killed_at) << std::endl;

  absl::StatusOr<JobStatus> end = AwaitSuccess(
      cluster, job->id, absl::Seconds(300), {"psd0", "psd2", "worker0"});
  ASSERT_TRUE(end.ok() && end->state() == SUCCEEDED);

  // Acknowledged: every step of every worker (they all finished).
  const uint64_t acknowledged = kWorkers * kStepsPerWorker;
  std::map<uint32_t, uint64_t> versions;
  for (int s : {0, 2}) {
    absl::Status read =
        ReadServedVersions(job->addresses[s], job->id, 0, &versions);
    ASSERT_TRUE(read.ok()) << read;
  }
  ASSERT_EQ(versions.size(),
            static_cast<size_t>(end->placement().chunks_size()));
  for (const auto& [chunk, version] : versions) {
    EXPECT_EQ(version, acknowledged)
        << "chunk " << chunk << ": applied updates != acknowledged pushes ("
        << (version < acknowledged ? "lost" : "applied twice") << ")";
  }
  if (HasFailure()) {
    for (const char* name : {"worker0", "worker1", "psd0", "psd2"}) {
      std::cout << "--- " << name << " ---\n" << cluster.Log(name) << "\n";
    }
  }
  // The successor dropped the retries of pushes it already held.
  absl::StatusOr<JobStats> s2 = ReadShardJobStats(job->addresses[2], job->id);
  ASSERT_TRUE(s2.ok()) << s2.status();
  EXPECT_EQ(s2->backup_chunks(), 0u);
  EXPECT_EQ(s2->replica_epoch(), 1u);
  std::cout << versions.size() << " chunks, each at version " << acknowledged
            << " = " << kWorkers << " workers x " << kStepsPerWorker
            << " acknowledged steps; shard 2 dropped " << s2->duplicates()
            << " retried pushes as duplicates" << std::endl;
  (void)cluster.Stop();  // the killed shard exits by SIGKILL: reported
}

}  // namespace
}  // namespace ps
