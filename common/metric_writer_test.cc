#include "common/metric_writer.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

std::string Render(MetricWriter* w) {
  return prometheus::TextSerializer().Serialize(w->Take());
}

TEST(MetricWriterTest, CountersAndGaugesGroupByName) {
  MetricWriter w;
  w.Counter("ps_pushes_total", "Pushes.", {{"job", "a"}}, 3);
  w.Gauge("ps_pending", "Pending.", {{"job", "a"}}, 1);
  w.Counter("ps_pushes_total", "Pushes.", {{"job", "b"}}, 5);
  const std::string text = Render(&w);
  EXPECT_THAT(text, HasSubstr("# TYPE ps_pushes_total counter\n"
                              "ps_pushes_total{job=\"a\"} 3\n"
                              "ps_pushes_total{job=\"b\"} 5\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE ps_pending gauge\n"
                              "ps_pending{job=\"a\"} 1\n"));
  EXPECT_EQ(Render(&w), "");  // Take() emptied it
}

TEST(MetricWriterTest, LabelValuesAreEscaped) {
  MetricWriter w;
  w.Gauge("g", "G.", {{"job", "a\"b\\c\nd"}}, 1);
  EXPECT_THAT(Render(&w), HasSubstr("g{job=\"a\\\"b\\\\c\\nd\"} 1"));
}

TEST(HistogramFromProtoTest, IntegerBucketsAreInclusive) {
  Histogram h;  // bucket 0: 0, bucket 1: 1, bucket 2: [2, 4), bucket 3: >= 4
  for (double b : {1, 2, 4}) h.add_bounds(b);
  for (uint64_t c : {5, 1, 2, 3}) h.add_counts(c);
  h.set_sum(20);
  HistogramSample s = HistogramFromProto(h, /*integers=*/true);
  ASSERT_EQ(s.buckets.size(), 3u);
  EXPECT_EQ(s.buckets[0].upper_bound, 0);
  EXPECT_EQ(s.buckets[0].cumulative_count, 5u);
  EXPECT_EQ(s.buckets[1].upper_bound, 1);
  EXPECT_EQ(s.buckets[1].cumulative_count, 6u);
  EXPECT_EQ(s.buckets[2].upper_bound, 3);
  EXPECT_EQ(s.buckets[2].cumulative_count, 8u);
  EXPECT_EQ(s.count, 11u);
  EXPECT_EQ(s.sum, 20);
}

TEST(HistogramFromProtoTest, RenderedWithInfBucket) {
  Histogram h;
  h.add_bounds(0.001);
  h.add_counts(2);
  h.add_counts(1);
  h.set_sum(0.5);
  MetricWriter w;
  w.Histogram("ps_apply_duration_seconds", "Apply.", {{"shard", "0"}},
              HistogramFromProto(h, /*integers=*/false));
  const std::string text = Render(&w);
  EXPECT_THAT(text,
              HasSubstr("ps_apply_duration_seconds_count{shard=\"0\"} 3"));
  EXPECT_THAT(text,
              HasSubstr("ps_apply_duration_seconds_sum{shard=\"0\"} 0.5"));
  EXPECT_THAT(
      text,
      HasSubstr(
          "ps_apply_duration_seconds_bucket{shard=\"0\",le=\"0.001\"} 2"));
  EXPECT_THAT(
      text,
      HasSubstr("ps_apply_duration_seconds_bucket{shard=\"0\",le=\"+Inf\"} 3"));
}

TEST(HistogramFromProtoTest, CountsWithoutBoundsStillCount) {
  Histogram h;  // malformed: more counts than bounds + 1
  h.add_counts(1);
  h.add_counts(2);
  HistogramSample s = HistogramFromProto(h, /*integers=*/false);
  EXPECT_TRUE(s.buckets.empty());
  EXPECT_EQ(s.count, 3u);
}

}  // namespace
}  // namespace ps
