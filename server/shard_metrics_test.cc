// ShardMetrics over a real Shard: the Stats of a BSP job rendered as
// Prometheus text, names, labels and values.
#include "server/shard_metrics.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"
#include "server/shard.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace shard_test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Scrape(const Shard& shard) {
  return prometheus::TextSerializer().Serialize(ShardMetrics(&shard).Collect());
}

TEST(ShardMetricsTest, BspJobCountersHistogramsAndQueue) {
  Shard shard(Options(/*shard_id=*/0));
  const RegisterJobRequest reg = Registration("j", Spec(BSP, 2));
  RegisterJobResponse resp;
  ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
  auto a = StartPushPull(shard, reg, 0, 0, 0);
  auto b = StartPushPull(shard, reg, 1, 0, 0);
  auto c = StartPushPull(shard, reg, 1, 1, 1);  // waits for worker 0
  ASSERT_TRUE(b->status.ok());

  const std::string text = Scrape(shard);
  const std::string job = "{shard=\"0\",job=\"j\"}";
  EXPECT_THAT(text, HasSubstr("ps_shard_jobs{shard=\"0\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE ps_pushes_total counter\n"));
  EXPECT_THAT(text, HasSubstr("ps_pushes_total" + job + " 12\n"));
  EXPECT_THAT(text, HasSubstr("ps_pulls_total" + job + " 8\n"));
  EXPECT_THAT(text, HasSubstr("ps_received_bytes_total" + job + " 3720\n"));
  EXPECT_THAT(text, HasSubstr("ps_sent_bytes_total" + job + " 2480\n"));
  EXPECT_THAT(text, HasSubstr("ps_applied_steps" + job + " 1\n"));
  EXPECT_THAT(text, HasSubstr("ps_optimizer_applies_total" + job + " 4\n"));
  EXPECT_THAT(text, HasSubstr("ps_pending_requests" + job + " 1\n"));
  // Two answered PushPulls; four chunk applies.
  EXPECT_THAT(text, HasSubstr("# TYPE ps_request_duration_seconds histogram"));
  EXPECT_THAT(text, HasSubstr("ps_request_duration_seconds_count{shard=\"0\","
                              "job=\"j\",method=\"PushPull\"} 2\n"));
  EXPECT_THAT(text,
              HasSubstr("ps_apply_duration_seconds_count" + job + " 4\n"));
  EXPECT_THAT(
      text, HasSubstr("ps_apply_duration_seconds_bucket{shard=\"0\",job=\"j\","
                      "le=\"+Inf\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("ps_push_staleness_count" + job + " "));
  EXPECT_THAT(text, HasSubstr("ps_worker_pushes_total{shard=\"0\",job=\"j\","
                              "worker=\"1\"} 8\n"));
  EXPECT_THAT(text, Not(HasSubstr("ps_table_rows")));  // no tables

  // The apply histogram's sum is positive and in seconds (below 1 s here).
  ShardStats stats;
  shard.Stats(StatsRequest(), &stats);
  const Histogram& apply = stats.job_stats(0).apply_seconds();
  EXPECT_GT(apply.sum(), 0);
  EXPECT_LT(apply.sum(), 1);
  EXPECT_EQ(apply.bounds_size() + 1, apply.counts_size());

  // A dropped job's series are gone.
  DropJobRequest drop;
  drop.set_job_id("j");
  ASSERT_TRUE(shard.DropJob(drop).ok());
  const std::string after = Scrape(shard);
  EXPECT_THAT(after, HasSubstr("ps_shard_jobs{shard=\"0\"} 0\n"));
  EXPECT_THAT(after, Not(HasSubstr("job=\"j\"")));
  c->done.WaitForNotification();
}

TEST(ShardMetricsTest, ReplicatedJobShowsDroppedBackups) {
  JobStats j;
  j.set_job_id("r");
  j.set_backup_chunks(2);
  j.set_replica_forwards(7);
  j.set_replica_drops(3);
  j.set_replica_epoch(1);
  ShardStats stats;
  *stats.add_job_stats() = j;
  j.set_job_id("plain");
  j.set_backup_chunks(0);
  j.set_replica_forwards(0);
  j.set_replica_drops(0);
  j.set_replica_epoch(0);
  *stats.add_job_stats() = j;
  const std::string text =
      prometheus::TextSerializer().Serialize(ShardMetricFamilies(stats));
  const std::string job = "{shard=\"0\",job=\"r\"}";
  EXPECT_THAT(text, HasSubstr("ps_replica_drops_total" + job + " 3\n"));
  EXPECT_THAT(text, HasSubstr("ps_replica_forwards_total" + job + " 7\n"));
  EXPECT_THAT(text, HasSubstr("ps_replica_epoch" + job + " 1\n"));
  EXPECT_THAT(text, HasSubstr("ps_replica_backup_chunks" + job + " 2\n"));
  EXPECT_THAT(text, Not(HasSubstr("ps_replica_drops_total{shard=\"0\","
                                  "job=\"plain\"}")));
}

TEST(ShardMetricsTest, RejectedRequestsByReason) {
  Shard shard(Options(0));
  PushRequest push;
  push.set_job_id("nope");
  PushResponse resp;
  EXPECT_FALSE(shard.Push(push, &resp).ok());
  EXPECT_THAT(Scrape(shard),
              HasSubstr("ps_shard_rejected_requests_total{shard=\"0\","
                        "reason=\"unknown_job\"} 1\n"));
}

}  // namespace
}  // namespace shard_test
}  // namespace ps
