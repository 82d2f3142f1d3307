// Shard tests. Stats: every field of ShardStats and JobStats.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace shard_test {
namespace {

using ::testing::ElementsAre;

TEST(ShardStatsTest, FilledCompletely) {
  ShardOptions options;
  options.address = "localhost:7000";
  Shard shard(options);
  const RegisterJobRequest reg = Registration("j", Spec(BSP, 2));
  RegisterJobResponse resp;
  ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
  auto a = StartPushPull(shard, reg, 0, 0, 0);
  auto b = StartPushPull(shard, reg, 1, 0, 0);
  auto c = StartPushPull(shard, reg, 1, 1, 1);
  ASSERT_TRUE(b->status.ok());

  ShardStats stats;
  shard.Stats(StatsRequest(), &stats);
  EXPECT_EQ(stats.shard_id(), 0u);
  EXPECT_EQ(stats.address(), "localhost:7000");
  EXPECT_GE(stats.uptime_s(), 0);
  EXPECT_EQ(stats.jobs(), 1u);
  EXPECT_EQ(stats.chunks(), 4u);
  EXPECT_EQ(stats.bytes_held(), resp.bytes_held());
  EXPECT_EQ(stats.memory_budget_bytes(), 8ull << 30);
  ASSERT_EQ(stats.job_stats_size(), 1);
  const JobStats& s = stats.job_stats(0);
  EXPECT_EQ(s.job_id(), "j");
  EXPECT_EQ(s.mode(), BSP);
  EXPECT_EQ(s.version(), 1u);
  EXPECT_EQ(s.step(), 1u);
  EXPECT_EQ(s.chunks(), 4u);
  EXPECT_EQ(s.bytes_held(), resp.bytes_held());
  EXPECT_EQ(s.pushes(), 12u);
  EXPECT_EQ(s.pulls(), 8u);  // two answered PushPulls x 4 chunks
  EXPECT_EQ(s.bytes_in(), 3u * 310 * 4);
  EXPECT_EQ(s.bytes_out(), 2u * 310 * 4);
  EXPECT_EQ(s.applies(), 4u);
  EXPECT_GT(s.apply_latency_p50_us(), 0);
  EXPECT_GE(s.apply_latency_p99_us(), s.apply_latency_p50_us());
  EXPECT_THAT(s.missing_workers(), ElementsAre(0));
  ASSERT_EQ(s.workers_size(), 2);
  EXPECT_EQ(s.workers(1).worker(), 1u);
  EXPECT_EQ(s.workers(1).last_step(), 1u);
  EXPECT_EQ(s.workers(1).pushes(), 8u);
  EXPECT_EQ(s.workers(0).last_step(), 0u);
  EXPECT_TRUE(s.workers(0).active());
  EXPECT_EQ(s.staleness().bounds_size() + 1, s.staleness().counts_size());

  // Filtering by job, and an unknown job gives no job stats.
  StatsRequest other;
  other.set_job_id("other");
  shard.Stats(other, &stats);
  EXPECT_EQ(stats.job_stats_size(), 0);
  EXPECT_EQ(stats.jobs(), 1u);

  // `c` still waits; fail it before it goes out of scope.
  shard.Shutdown();
  EXPECT_EQ(c->status.code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace shard_test
}  // namespace ps
