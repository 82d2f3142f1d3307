// Trace Event Format JSON (chrome://tracing, Perfetto) from the spans that
// the workers and shards recorded for a trace window (psctl trace).
//
//   TraceInput in;
//   in.window = window;
//   in.workers = {rank 0's WorkerTrace, ...};
//   in.shards = {shard 0's ShardTrace, ...};
//   TraceSummary sum = WriteTraceJson(in, out);
//
// Processes: each workerd (pid 1000 + rank) and each psd shard (pid 1 +
// shard id), named by "M" events. Threads of a worker: "step" (step, data
// wait, compute, comm wait), one per device (forward, backward), "local
// reduce", and "shard S calls" lanes (each PushPull call, its reply decode
// nested at its end); of a shard: "apply" lanes and "worker W requests"
// lanes. Calls that overlap in time go to separate lanes so that every
// thread's "X" events nest. One flow ("s" -> "t" -> "f", cat "step", one id)
// per (worker, shard, step): from the worker's first call of the step to
// the shard, through the shard's apply of the step, to the last reply's
// decode. Times are microseconds from the earliest span.
#ifndef TOOLS_PSCTL_TRACE_JSON_H_
#define TOOLS_PSCTL_TRACE_JSON_H_

#include <cstdint>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "proto/coordinator.pb.h"
#include "proto/ps.pb.h"

namespace ps {

struct TraceInput {
  TraceWindow window;
  std::string job_name;
  std::vector<WorkerTrace> workers;
  std::vector<ShardTrace> shards;
};

struct TraceSummary {
  uint64_t events = 0;
  uint64_t flows = 0;
  uint64_t dropped = 0;  // spans the recorders dropped past their cap
  // Window steps with no TRACE_STEP span on some worker (the window reached
  // it late, or the job ended first).
  std::set<uint64_t> missing_steps;
};

TraceSummary WriteTraceJson(const TraceInput& in, std::ostream& out);

}  // namespace ps

#endif  // TOOLS_PSCTL_TRACE_JSON_H_
