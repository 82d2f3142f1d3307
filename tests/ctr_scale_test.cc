// psctl scale on a CTR job (dense MLP + sparse table) on real processes: a
// BSP SHRINK job on ctr-synthetic with lr_rule LR_RULE_LINEAR and
// DATA_RESCALE_AT_ONCE, submitted on 2 workers, grows to 3 mid-job and
// succeeds. The new rank joins the data split at the next step (the elastic
// data plan, as for mlp and cnn models); the coordinator logs the learning
// rates the linear rule gives at 3 of 2 workers, for the dense optimizer and
// for the table's; every step is applied exactly once on every dense chunk,
// ranks 0 and 1 pushed every step and the joined rank every step from its
// first; the model still learns (test AUC).
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "tests/local_cluster.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/ctr_job.h"
#include "tests/testing/elastic_job.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

class CtrScaleTest : public ClusterTest {
 protected:
  LocalClusterOptions ClusterOptions() const override {
    LocalClusterOptions o;
    o.workers = 3;
    return o;
  }
};

TEST_F(CtrScaleTest, GrowsTwoToThreeWithTheLinearRuleOnTheTable) {
  CtrJob spec;
  spec.name = "ctr-scale";
  spec.hidden = {32};
  // 819200 / (2 x 256) = 1600 steps on 2 workers, fewer once 3 read: long
  // enough to run past the scale on a fast machine.
  spec.synthetic_train = 819200;
  spec.synthetic_test = 4096;
  spec.extra =
      "max_workers: 3\non_worker_failure: SHRINK\nlr_rule: LR_RULE_LINEAR\n"
      "data_rescale: DATA_RESCALE_AT_ONCE\n";
  const std::string job = Submit(CtrJobSpec(spec));
  JobStatus js;
  ASSERT_TRUE(WaitFor(
      job, [](const JobStatus& s) { return s.progress().step() >= 10; },
      absl::Seconds(60), &js))
      << js.ShortDebugString();

  absl::StatusOr<CommandResult> r =
      cluster_->Psctl({"scale", job, "--workers=3"});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << r->out << r->err;
  EXPECT_THAT(r->out, HasSubstr("scale: 2 -> 3 workers"));
  ASSERT_TRUE(WaitFor(
      job,
      [](const JobStatus& s) {
        return s.state() != RUNNING || s.scale().reached_s() > 0;
      },
      absl::Seconds(30), &js))
      << js.ShortDebugString();
  EXPECT_EQ(js.scale().active_workers(), 3u) << js.ShortDebugString();
  ASSERT_TRUE(WaitFor(
      job, [](const JobStatus& s) { return s.state() != RUNNING; },
      absl::Seconds(240), &js))
      << js.ShortDebugString();
  ASSERT_EQ(js.state(), SUCCEEDED) << js.reason();
  EXPECT_GT(js.progress().test_auc(), 0.6f) << js.ShortDebugString();

  // The linear rule at 3 of 2 workers: dense ADAGRAD 0.01 and the table's
  // 0.05, each x 3/2.
  const std::string coordinator = cluster_->Log("psd0");
  EXPECT_THAT(coordinator,
              HasSubstr("3 workers per step: learning rate 0.01 x 3/2 = "
                        "0.015; table emb: 0.05 x 3/2 = 0.075"))
      << coordinator;

  const uint64_t total = js.progress().total_steps();
  // The joined rank's first step, from its log.
  int64_t joined_at = -1;
  for (int i = 0; i < 3; ++i) {
    const std::string log = cluster_->Log(absl::StrCat("worker", i));
    const int64_t at = NumberAfter(log, ": rank 2 of 3, starting at step ");
    if (at >= 0) joined_at = at;
  }
  ASSERT_GT(joined_at, 0);
  ASSERT_LT(joined_at, static_cast<int64_t>(total));
  // 2 workers read 512 examples a step until the join, 3 read 768 after.
  EXPECT_EQ(total, joined_at + (819200 - 512 * joined_at) / 768);
  absl::StatusOr<std::vector<std::string>> addresses =
      ShardAddresses(*cluster_, 2);
  ASSERT_TRUE(addresses.ok()) << addresses.status();
  absl::StatusOr<FinishedJob> done =
      ReadFinishedJob(*cluster_, job, *addresses);
  ASSERT_TRUE(done.ok()) << done.status();
  for (const JobStats& stats : done->shard_stats) {
    SCOPED_TRACE(stats.ShortDebugString());
    if (stats.chunks() == 0) continue;
    EXPECT_EQ(stats.version(), total);
    EXPECT_EQ(stats.applies(), total * stats.chunks());
    EXPECT_EQ(stats.duplicates(), 0u);
    uint64_t joined = 0;
    for (const WorkerStats& w : stats.workers()) {
      if (w.worker() < 2) {
        EXPECT_EQ(w.pushes(), total * stats.chunks()) << w.worker();
      } else {
        joined += w.pushes();
      }
    }
    EXPECT_EQ(joined, (total - joined_at) * stats.chunks());
    EXPECT_EQ(stats.stale_pushes(), 0u);
  }
}

}  // namespace
}  // namespace ps
