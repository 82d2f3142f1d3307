// A worker leaves cleanly (WorkerdConfig.leave_on_term): SIGTERM in the
// middle of a BSP SHRINK job. The worker finishes the step in flight,
// unregisters and exits 0; the coordinator drops its rank at once (the
// job's reason says "left", long before the heartbeat timeout could say
// "lost"); the survivor finishes the job. Every step is applied exactly
// once on every chunk, and each worker's accepted pushes are exactly the
// steps it ran: the leaver's up to the step it named, none half-applied.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "tests/local_cluster.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/elastic_job.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

class WorkerLeaveTest : public ClusterTest {
 protected:
  LocalClusterOptions ClusterOptions() const override {
    LocalClusterOptions o;
    o.workerd_extra = "leave_on_term: true\n";
    return o;
  }
};

TEST_F(WorkerLeaveTest, SigtermLeavesAtOnceAndNoStepIsHalfApplied) {
  const std::string job = Submit(
      ElasticMlpJob("leave", /*epochs=*/16, /*max_workers=*/0));  // 2048 steps;
  JobStatus js;
  ASSERT_TRUE(WaitFor(
      job, [](const JobStatus& s) { return s.progress().step() >= 20; },
      absl::Seconds(60), &js))
      << js.ShortDebugString();
  ASSERT_EQ(js.workers_size(), 2) << js.ShortDebugString();
  // Rank 1's worker leaves (workers register in either order).
  const int leaver = js.workers(1) == "worker1" ? 1 : 0;
  const absl::Time term = absl::Now();
  absl::StatusOr<int> exit_code =
      cluster_->worker(leaver).Stop(absl::Seconds(20));
  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(*exit_code, 0);
  const std::string log = cluster_->Log(absl::StrCat("worker", leaver));
  const int64_t next_step =
      NumberAfter(log, "left the coordinator before step ");
  ASSERT_GT(next_step, 0) << log;

  // Dropped at once: "left", well within LocalCluster's 3 s worker timeout.
  ASSERT_TRUE(WaitFor(
      job,
      [](const JobStatus& s) {
        return s.state() != RUNNING ||
               s.reason().find(" left: ") != std::string::npos;
      },
      absl::Seconds(10), &js))
      << js.ShortDebugString();
  EXPECT_LT(absl::Now() - term, absl::Seconds(3));
  EXPECT_THAT(js.reason(),
              HasSubstr(absl::StrCat("left: after step ", next_step - 1,
                                     " (the last counted)")));

  ASSERT_TRUE(WaitFor(
      job, [](const JobStatus& s) { return s.state() != RUNNING; },
      absl::Seconds(200), &js))
      << js.ShortDebugString();
  ASSERT_EQ(js.state(), SUCCEEDED) << js.reason();
  const uint64_t total = js.progress().total_steps();
  ASSERT_EQ(total, 2048u);

  absl::StatusOr<std::vector<std::string>> addresses =
      ShardAddresses(*cluster_, 2);
  ASSERT_TRUE(addresses.ok()) << addresses.status();
  absl::StatusOr<FinishedJob> done =
      ReadFinishedJob(*cluster_, job, *addresses);
  ASSERT_TRUE(done.ok()) << done.status();
  for (const JobStats& stats : done->shard_stats) {
    // Every step applied once on every chunk: no step lost or repeated.
    EXPECT_EQ(stats.version(), total) << stats.ShortDebugString();
    EXPECT_EQ(stats.applies(), total * stats.chunks());
    EXPECT_EQ(stats.duplicates(), 0u);
    // Each worker's accepted pushes: one per chunk for each step it ran.
    for (const WorkerStats& w : stats.workers()) {
      const uint64_t steps = w.worker() == 1 ? next_step : total;
      EXPECT_EQ(w.pushes(), steps * stats.chunks()) << w.ShortDebugString();
    }
  }
}

}  // namespace
}  // namespace ps
