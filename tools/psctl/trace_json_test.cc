#include "tools/psctl/trace_json.h"

#include <sstream>
#include <string>

#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

TraceSpan Span(TraceSpanKind kind, uint64_t step, int64_t start, int64_t end) {
  TraceSpan s;
  s.set_kind(kind);
  s.set_step(step);
  s.set_start_ns(start);
  s.set_end_ns(end);
  return s;
}

// One worker, one shard, step 7: two overlapping calls to the shard (two
// lanes), their replies, the shard's BSP apply.
TraceInput OneStep() {
  TraceInput in;
  in.window.set_job_id("job-1");
  in.window.set_begin_step(7);
  in.window.set_end_step(8);
  WorkerTrace w;
  w.set_rank(0);
  w.set_name("w0");
  w.add_devices("cpu:0");
  *w.add_spans() = Span(TRACE_STEP, 7, 1000, 9000);
  *w.add_spans() = Span(TRACE_DATA_WAIT, 7, 1000, 2000);
  *w.add_spans() = Span(TRACE_COMPUTE, 7, 2000, 5000);
  *w.add_spans() = Span(TRACE_FORWARD, 7, 2000, 3000);
  for (int64_t start : {5000, 5500}) {
    TraceSpan call = Span(TRACE_RPC, 7, start, start + 3000);
    *w.add_spans() = call;
    call.set_kind(TRACE_PULL_REPLY);
    call.set_start_ns(start + 2900);
    *w.add_spans() = call;
  }
  in.workers.push_back(w);
  ShardTrace sh;
  sh.set_shard_id(0);
  TraceSpan apply = Span(TRACE_SHARD_APPLY, 7, 6000, 6500);
  apply.set_all_workers(true);
  *sh.add_spans() = apply;
  in.shards.push_back(sh);
  return in;
}

TEST(TraceJsonTest, ValidJsonWithLanesAndOneFlowChain) {
  std::ostringstream out;
  TraceSummary sum = WriteTraceJson(OneStep(), out);
  EXPECT_EQ(sum.flows, 1u);
  EXPECT_TRUE(sum.missing_steps.empty());
  google::protobuf::Struct root;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(out.str(), &root).ok())
      << out.str();
  std::string phases;
  std::set<double> call_tids;
  for (const auto& v : root.fields().at("traceEvents").list_value().values()) {
    const auto& e = v.struct_value().fields();
    const std::string ph = e.at("ph").string_value();
    if (ph == "s" || ph == "t" || ph == "f") {
      phases += ph;
      EXPECT_EQ(e.at("id").number_value(), 1);
    }
    if (ph == "X" && e.at("name").string_value() == "PushPull") {
      call_tids.insert(e.at("tid").number_value());
    }
    if (ph == "X" && e.at("name").string_value() == "data wait") {
      EXPECT_EQ(e.at("ts").number_value(), 0);   // the earliest span
      EXPECT_EQ(e.at("dur").number_value(), 1);  // 1000 ns
    }
  }
  EXPECT_EQ(phases, "stf");
  EXPECT_EQ(call_tids.size(), 2u);  // overlapping calls, two lanes
}

TEST(TraceJsonTest, MissingStepsAreReported) {
  TraceInput in = OneStep();
  in.window.set_end_step(10);
  std::ostringstream out;
  TraceSummary sum = WriteTraceJson(in, out);
  EXPECT_EQ(sum.missing_steps, (std::set<uint64_t>{8, 9}));
}

}  // namespace
}  // namespace ps
