#include "server/stats.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(LatencyHistogramTest, EmptyIsZero) {
  LatencyHistogram h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.Percentile(0.5), 0);
}

TEST(LatencyHistogramTest, SmallValuesAreExact) {
  LatencyHistogram h;
  for (uint64_t v : {0, 1, 2, 3}) h.Record(v);
  EXPECT_EQ(h.Percentile(0.25), 0);
  EXPECT_EQ(h.Percentile(0.5), 1);
  EXPECT_EQ(h.Percentile(1.0), 3);
}

TEST(LatencyHistogramTest, PercentilesWithinABucketOfTheTruth) {
  LatencyHistogram h;
  // 1..100000: p50 = 50000, p99 = 99000.
  for (uint64_t v = 1; v <= 100000; ++v) h.Record(v);
  EXPECT_EQ(h.count(), 100000u);
  EXPECT_NEAR(h.Percentile(0.5), 50000, 50000 * 0.125);
  EXPECT_NEAR(h.Percentile(0.99), 99000, 99000 * 0.125);
  EXPECT_LE(h.Percentile(0.5), h.Percentile(0.99));
}

TEST(LatencyHistogramTest, OutlierOnlyMovesTheTail) {
  LatencyHistogram h;
  for (int i = 0; i < 999; ++i) h.Record(1000);
  h.Record(uint64_t{1} << 62);
  EXPECT_NEAR(h.Percentile(0.5), 1000, 125);
  EXPECT_NEAR(h.Percentile(0.99), 1000, 125);
  EXPECT_GT(h.Percentile(1.0), 1e18);
}

TEST(PowerOfTwoHistogramTest, BucketsMatchTheProtoBounds) {
  PowerOfTwoHistogram h;
  for (uint64_t v : {0, 0, 1, 2, 3, 4, 7, 8, 1000000}) h.Record(v);
  Histogram p;
  h.ToProto(&p);
  ASSERT_EQ(p.bounds_size(), PowerOfTwoHistogram::kNumBuckets - 1);
  ASSERT_EQ(p.counts_size(), PowerOfTwoHistogram::kNumBuckets);
  EXPECT_EQ(p.bounds(0), 1);
  EXPECT_EQ(p.bounds(3), 8);
  EXPECT_EQ(p.counts(0), 2u);  // [.., 1): 0, 0
  EXPECT_EQ(p.counts(1), 1u);  // [1, 2)
  EXPECT_EQ(p.counts(2), 2u);  // [2, 4)
  EXPECT_EQ(p.counts(3), 2u);  // [4, 8)
  EXPECT_EQ(p.counts(4), 1u);  // [8, 16)
  EXPECT_EQ(p.counts(PowerOfTwoHistogram::kNumBuckets - 1), 1u);  // 1e6
}

TEST(ReasonCountsTest, CountsSetsAndCopies) {
  ReasonCounts r;
  r.Add("wrong_size");
  r.Add("wrong_size");
  r.Set("no_checkpoint_dir", 1);
  JobStats js;
  (*js.mutable_rejected())["other"] = 7;
  r.CopyTo(js.mutable_rejected());
  EXPECT_EQ(js.rejected().at("wrong_size"), 2u);
  EXPECT_EQ(js.rejected().at("no_checkpoint_dir"), 1u);
  EXPECT_EQ(js.rejected().at("other"), 7u);
}

}  // namespace
}  // namespace ps
