#include "common/trace_recorder.h"

#include "gtest/gtest.h"

namespace ps {
namespace {

TraceWindow Window(uint64_t begin, uint64_t end) {
  TraceWindow w;
  w.set_job_id("job-1");
  w.set_begin_step(begin);
  w.set_end_step(end);
  return w;
}

TraceSpan Span(TraceSpanKind kind, uint64_t step, int64_t start, int64_t end) {
  TraceSpan s;
  s.set_kind(kind);
  s.set_step(step);
  s.set_start_ns(start);
  s.set_end_ns(end);
  return s;
}

TEST(TraceRecorderTest, CoversOnlyTheWindow) {
  TraceRecorder rec;
  EXPECT_FALSE(rec.Covers(0));
  rec.SetWindow(Window(10, 12));
  EXPECT_FALSE(rec.Covers(9));
  EXPECT_TRUE(rec.Covers(10));
  EXPECT_TRUE(rec.Covers(11));
  EXPECT_FALSE(rec.Covers(12));
  rec.Clear();
  EXPECT_FALSE(rec.Covers(10));
  EXPECT_EQ(rec.window().job_id(), "");
}

TEST(TraceRecorderTest, CompleteOnceAStepPastTheEndStarted) {
  TraceRecorder rec;
  rec.SetWindow(Window(3, 5));
  rec.Reached(5);
  EXPECT_FALSE(rec.Complete());
  rec.Reached(2);  // never goes back
  rec.Reached(6);
  EXPECT_TRUE(rec.Complete());
  rec.SetWindow(Window(7, 9));  // a new window starts over
  EXPECT_FALSE(rec.Complete());
}

TEST(TraceRecorderTest, NewWindowDropsSpansSameWindowKeepsThem) {
  TraceRecorder rec;
  rec.SetWindow(Window(0, 4));
  rec.Add(Span(TRACE_STEP, 1, 10, 20));
  rec.SetWindow(Window(0, 4));
  EXPECT_EQ(rec.Copy().spans.size(), 1u);
  rec.SetWindow(Window(2, 4));
  TraceRecorder::Snapshot snap = rec.Copy();
  EXPECT_TRUE(snap.spans.empty());
  EXPECT_EQ(snap.window.begin_step(), 2u);
}

TEST(TraceRecorderTest, CapsSpansAndCountsTheRest) {
  TraceRecorder rec(/*max_spans=*/3);
  rec.SetWindow(Window(0, 100));
  for (int i = 0; i < 5; ++i) rec.Add(Span(TRACE_STEP, i, i, i + 1));
  rec.AddMerged(Span(TRACE_SHARD_APPLY, 50, 1, 2));
  TraceRecorder::Snapshot snap = rec.Copy();
  EXPECT_EQ(snap.spans.size(), 3u);
  EXPECT_EQ(snap.dropped, 3u);
}

TEST(TraceRecorderTest, AddMergedWidensTheStepsSpan) {
  TraceRecorder rec;
  rec.SetWindow(Window(0, 10));
  TraceSpan a = Span(TRACE_SHARD_APPLY, 4, 100, 110);
  a.set_all_workers(true);
  TraceSpan b = Span(TRACE_SHARD_APPLY, 4, 90, 105);
  b.set_all_workers(true);
  TraceSpan other = Span(TRACE_SHARD_APPLY, 5, 200, 210);
  other.set_all_workers(true);
  rec.AddMerged(a);
  rec.AddMerged(b);
  rec.AddMerged(other);
  TraceRecorder::Snapshot snap = rec.Copy();
  ASSERT_EQ(snap.spans.size(), 2u);
  EXPECT_EQ(snap.spans[0].start_ns(), 90);
  EXPECT_EQ(snap.spans[0].end_ns(), 110);
  EXPECT_EQ(snap.spans[1].step(), 5u);
}

}  // namespace
}  // namespace ps
