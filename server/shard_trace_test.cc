// Shard tests. Step timelines: SetTrace's window and checks, and the spans
// GetTrace answers: one request span per (worker, step) in the window, one
// apply span per BSP step (every chunk's apply merged) or per ASP push.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "common/trace_recorder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace shard_test {
namespace {

using ::testing::HasSubstr;

absl::Status SetWindow(Shard& shard, const std::string& job, uint64_t begin,
                       uint64_t end) {
  SetTraceRequest req;
  req.mutable_window()->set_job_id(job);
  req.mutable_window()->set_begin_step(begin);
  req.mutable_window()->set_end_step(end);
  return shard.SetTrace(req);
}

ShardTrace TraceOf(const Shard& shard, const std::string& job) {
  ShardTraceRequest req;
  req.set_job_id(job);
  ShardTrace out;
  EXPECT_TRUE(shard.GetTrace(req, &out).ok());
  return out;
}

// Spans by (kind, step, worker), each with its count.
std::map<std::tuple<TraceSpanKind, uint64_t, uint32_t>, int> Census(
    const ShardTrace& t) {
  std::map<std::tuple<TraceSpanKind, uint64_t, uint32_t>, int> n;
  for (const TraceSpan& s : t.spans()) {
    EXPECT_LE(s.start_ns(), s.end_ns());
    ++n[{s.kind(), s.step(), s.worker()}];
  }
  return n;
}

class ShardTraceTest : public ::testing::Test {
 protected:
  void Register(ConsistencyMode mode) {
    reg_ = Registration("j", Spec(mode, 2));
    RegisterJobResponse resp;
    ASSERT_TRUE(shard_.RegisterJob(reg_, &resp).ok());
  }

  Shard shard_{ShardOptions{}};
  RegisterJobRequest reg_;
};

TEST_F(ShardTraceTest, SetTraceRefusesUnknownJobsAndBadRanges) {
  Register(BSP);
  // A job the shard does not hold: as for every job RPC (FindJob).
  absl::Status unknown_job = SetWindow(shard_, "nope", 0, 10);
  EXPECT_EQ(unknown_job.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(unknown_job.message()), HasSubstr("no job \"nope\""));
  absl::Status empty = SetWindow(shard_, "j", 5, 5);
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(empty.message()), HasSubstr("window: empty"));
  absl::Status backwards = SetWindow(shard_, "j", 6, 5);
  EXPECT_EQ(backwards.code(), absl::StatusCode::kInvalidArgument);
  absl::Status longer = SetWindow(shard_, "j", 0, kTraceMaxSteps + 1);
  EXPECT_EQ(longer.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(longer.message()), HasSubstr("at most"));
  // Nothing was set: no window, and steps are not recorded.
  BspStep(shard_, reg_, 0);
  ShardTrace t = TraceOf(shard_, "j");
  EXPECT_EQ(t.window().end_step(), 0u);
  EXPECT_EQ(t.spans_size(), 0);

  ShardTraceRequest unknown;
  unknown.set_job_id("nope");
  ShardTrace out;
  EXPECT_EQ(shard_.GetTrace(unknown, &out).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(ShardTraceTest, BspRecordsEachRequestAndOneApplyPerStepInTheWindow) {
  Register(BSP);
  ASSERT_TRUE(SetWindow(shard_, "j", 1, 3).ok());
  for (uint64_t step = 0; step < 4; ++step) BspStep(shard_, reg_, step);
  const ShardTrace t = TraceOf(shard_, "j");
  EXPECT_EQ(t.window().begin_step(), 1u);
  EXPECT_EQ(t.window().end_step(), 3u);
  EXPECT_EQ(t.dropped(), 0u);
  std::map<std::tuple<TraceSpanKind, uint64_t, uint32_t>, int> want;
  for (uint64_t step : {1, 2}) {
    want[{TRACE_SHARD_REQUEST, step, 0}] = 1;
    want[{TRACE_SHARD_REQUEST, step, 1}] = 1;
    want[{TRACE_SHARD_APPLY, step, 0}] = 1;  // every chunk's, merged
  }
  EXPECT_EQ(Census(t), want);
  for (const TraceSpan& s : t.spans()) {
    if (s.kind() == TRACE_SHARD_APPLY) {
      EXPECT_TRUE(s.all_workers());
    }
  }
  // The step's apply runs inside the request that completed the step (the
  // last worker's), after the first worker's request started.
  for (uint64_t step : {1, 2}) {
    int64_t first_start = INT64_MAX, last_end = 0, apply_start = 0,
            apply_end = 0;
    for (const TraceSpan& s : t.spans()) {
      if (s.step() != step) continue;
      if (s.kind() == TRACE_SHARD_REQUEST) {
        first_start = std::min(first_start, s.start_ns());
        last_end = std::max(last_end, s.end_ns());
      } else {
        apply_start = s.start_ns();
        apply_end = s.end_ns();
      }
    }
    EXPECT_LE(first_start, apply_start) << "step " << step;
    EXPECT_LE(apply_end, last_end) << "step " << step;
  }
}

TEST_F(ShardTraceTest, AspRecordsAnApplyPerPushNamingTheWorker) {
  Register(ASP);
  ASSERT_TRUE(SetWindow(shard_, "j", 0, 2).ok());
  uint64_t version = 0;
  for (uint64_t step = 0; step < 3; ++step) {
    for (uint32_t w = 0; w < 2; ++w) {
      auto call = StartPushPull(shard_, reg_, w, step, version);
      ASSERT_TRUE(call->done.HasBeenNotified() && call->status.ok());
      version = call->resp.parameters(0).version();
    }
  }
  std::map<std::tuple<TraceSpanKind, uint64_t, uint32_t>, int> want;
  for (uint64_t step : {0, 1}) {
    for (uint32_t w : {0, 1}) {
      want[{TRACE_SHARD_REQUEST, step, w}] = 1;
      want[{TRACE_SHARD_APPLY, step, w}] = 1;
    }
  }
  EXPECT_EQ(Census(TraceOf(shard_, "j")), want);
}

TEST_F(ShardTraceTest, ANewWindowDropsTheOldSpans) {
  Register(BSP);
  ASSERT_TRUE(SetWindow(shard_, "j", 0, 2).ok());
  BspStep(shard_, reg_, 0);
  ASSERT_GT(TraceOf(shard_, "j").spans_size(), 0);
  // The same window again keeps what was recorded.
  ASSERT_TRUE(SetWindow(shard_, "j", 0, 2).ok());
  ASSERT_GT(TraceOf(shard_, "j").spans_size(), 0);
  ASSERT_TRUE(SetWindow(shard_, "j", 5, 6).ok());
  const ShardTrace t = TraceOf(shard_, "j");
  EXPECT_EQ(t.window().begin_step(), 5u);
  EXPECT_EQ(t.spans_size(), 0);
}

}  // namespace
}  // namespace shard_test
}  // namespace ps
