// psctl scale on real processes: a BSP SHRINK job submitted on 2 workers
// (max_workers 4: an elastic data job, its epochs split over the active
// workers, changing at epoch boundaries) grows to 4 mid-job, then back to
// 2, and succeeds. Every step is applied exactly once on every chunk (no
// duplicates); ranks 0 and 1 had every push of every step accepted; ranks 2
// and 3 joined and left at epoch boundaries, with every push of the steps
// between accepted (none stale, none lost). Bad input (0, past max_workers,
// an unknown job, a finished job) exits 2 naming why.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "tests/local_cluster.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/elastic_job.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

class ElasticScaleTest : public ClusterTest {
 protected:
  LocalClusterOptions ClusterOptions() const override {
    LocalClusterOptions o;
    o.workers = 4;
    return o;
  }
  // psctl scale JOB --workers=N: its exit code and output.
  CommandResult Scale(const std::string& job, const std::string& workers) {
    absl::StatusOr<CommandResult> r =
        cluster_->Psctl({"scale", job, "--workers=" + workers});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : CommandResult();
  }
};

TEST_F(ElasticScaleTest, GrowsTwoToFourAndBackWithNoUpdateLostOrRepeated) {
  // 4096 / (2 x 16) = 128 steps per epoch with 2 workers, 64 with 4.
  const std::string job =
      Submit(ElasticMlpJob("elastic", /*epochs=*/30, /*max_workers=*/4));
  JobStatus js;
  ASSERT_TRUE(WaitFor(
      job, [](const JobStatus& s) { return s.progress().step() >= 20; },
      absl::Seconds(60), &js))
      << js.ShortDebugString();

  CommandResult r = Scale(job, "4");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("scale: 2 -> 4 workers"));
  ASSERT_TRUE(WaitFor(
      job,
      [](const JobStatus& s) {
        return s.state() != RUNNING || s.scale().reached_s() > 0;
      },
      absl::Seconds(30), &js))
      << js.ShortDebugString();
  ASSERT_EQ(js.state(), RUNNING) << js.reason();
  EXPECT_EQ(js.scale().active_workers(), 4u);
  const uint64_t grown_at = js.progress().step();
  ASSERT_TRUE(WaitFor(
      job,
      [&](const JobStatus& s) {
        return s.state() != RUNNING || s.progress().step() >= grown_at + 200;
      },
      absl::Seconds(120), &js))
      << js.ShortDebugString();
  ASSERT_EQ(js.state(), RUNNING) << js.reason();

  // Bad input: refused, naming why; the job goes on unchanged.
  r = Scale(job, "0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("workers: must be >= 1"));
  r = Scale(job, "5");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("max_workers 4"));
  r = Scale("job-000042", "2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("job-000042"));

  r = Scale(job, "2");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_TRUE(WaitFor(
      job,
      [](const JobStatus& s) {
        return s.state() != RUNNING || s.scale().reached_s() > 0;
      },
      absl::Seconds(30), &js))
      << js.ShortDebugString();
  ASSERT_EQ(js.state(), RUNNING) << js.reason();
  EXPECT_EQ(js.scale().active_workers(), 2u);
  absl::StatusOr<CommandResult> status = cluster_->Psctl({"status", job});
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_THAT(status->out, HasSubstr("scale: 4 -> 2 workers, 2 active"));

  ASSERT_TRUE(WaitFor(
      job, [](const JobStatus& s) { return s.state() != RUNNING; },
      absl::Seconds(300), &js))
      << js.ShortDebugString();
  ASSERT_EQ(js.state(), SUCCEEDED) << js.reason();
  r = Scale(job, "3");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("SUCCEEDED; only a running job scales"));

  // Each worker's log: the rank it ran, the step it started at and, for
  // the two that left, the first step they did not run.
  const uint64_t total = js.progress().total_steps();
  std::vector<int64_t> start(4, -1), end(4, -1);
  for (int i = 0; i < 4; ++i) {
    const std::string log = cluster_->Log(absl::StrCat("worker", i));
    const int64_t rank = NumberAfter(log, ": rank ");
    ASSERT_GE(rank, 0) << log;
    ASSERT_LT(rank, 4) << log;
    start[rank] = NumberAfter(
        log, absl::StrCat(": rank ", rank, " of 4, starting at step "));
    const int64_t left = NumberAfter(log, "left the coordinator before step ");
    end[rank] = left >= 0 ? left : static_cast<int64_t>(total);
  }
  SCOPED_TRACE(absl::StrCat("ranks 2, 3 ran steps [", start[2], ", ", end[2],
                            ") and [", start[3], ", ", end[3], ")"));
  EXPECT_EQ(start[0], 0);
  EXPECT_EQ(start[1], 0);
  EXPECT_EQ(end[0], static_cast<int64_t>(total));
  EXPECT_EQ(end[1], static_cast<int64_t>(total));
  for (int rank : {2, 3}) {
    EXPECT_GT(start[rank], 0);
    EXPECT_LT(end[rank], static_cast<int64_t>(total));
    EXPECT_LE(start[rank], end[rank]);
  }

  absl::StatusOr<std::vector<std::string>> addresses =
      ShardAddresses(*cluster_, 2);
  ASSERT_TRUE(addresses.ok()) << addresses.status();
  absl::StatusOr<FinishedJob> done =
      ReadFinishedJob(*cluster_, job, *addresses);
  ASSERT_TRUE(done.ok()) << done.status();
  for (const JobStats& stats : done->shard_stats) {
    SCOPED_TRACE(stats.ShortDebugString());
    EXPECT_EQ(stats.version(), total);
    EXPECT_EQ(stats.applies(), total * stats.chunks());
    EXPECT_EQ(stats.duplicates(), 0u);
    uint64_t joined_pushes = 0;
    for (const WorkerStats& w : stats.workers()) {
      if (w.worker() < 2) {
        EXPECT_EQ(w.pushes(), total * stats.chunks());
      } else {
        joined_pushes += w.pushes();
      }
    }
    const uint64_t joined_steps = (end[2] - start[2]) + (end[3] - start[3]);
    EXPECT_EQ(joined_pushes, joined_steps * stats.chunks());
    EXPECT_EQ(stats.stale_pushes(), 0u);
    // A leaver's last step is in before the quorum leaves it out.
    EXPECT_EQ(stats.rejected().count("inactive_worker"), 0u);
  }
}

}  // namespace
}  // namespace ps
