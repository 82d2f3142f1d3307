// TraceRecorder: the bounded span buffer behind step timelines (psctl
// trace), shared by the workers' trainers and the shards. A window of steps
// [begin, end) is set from outside (a heartbeat answer, SetTrace); the hot
// path asks Covers(step), two relaxed atomic loads, and records spans only
// for covered steps. At most kTraceMaxSpans spans are kept: later ones are
// counted as dropped, so a trace never grows without bound.
//
//   TraceRecorder rec;
//   rec.SetWindow(window);                  // steps [10, 20) of the job
//   if (rec.Covers(step)) {
//     TraceSpan s;
//     s.set_kind(TRACE_STEP);
//     s.set_step(step);
//     s.set_start_ns(t0);
//     s.set_end_ns(TraceRecorder::NowNs());
//     rec.Add(s);
//   }
//   TraceRecorder::Snapshot snap = rec.Take();   // spans and window
//
// Thread-safe: any thread may call any method. Add and AddMerged take a
// mutex, so only covered steps pay for it.
#ifndef COMMON_TRACE_RECORDER_H_
#define COMMON_TRACE_RECORDER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/trace.pb.h"

namespace ps {

// Spans one recorder keeps (about 40 bytes each on the wire: one worker's
// or shard's upload stays far under the 4 MiB message limit). A memory
// bound, not a tuning knob.
inline constexpr size_t kTraceMaxSpans = 65536;
// Longest window StartTrace accepts, in steps.
inline constexpr uint64_t kTraceMaxSteps = 1000;

class TraceRecorder {
 public:
  struct Snapshot {
    TraceWindow window;
    std::vector<TraceSpan> spans;
    uint64_t dropped = 0;  // spans past max_spans
  };

  explicit TraceRecorder(size_t max_spans = kTraceMaxSpans)
      : max_spans_(max_spans) {}

  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  // Unix nanoseconds (CLOCK_REALTIME): comparable between processes of one
  // host, and across hosts as far as their clocks agree.
  static int64_t NowNs();

  // Records steps [window.begin_step, window.end_step) from now on and
  // drops what was recorded before (also the step reached). The same window
  // again changes nothing.
  void SetWindow(const TraceWindow& window) ABSL_LOCKS_EXCLUDED(mu_);
  // Stops recording and drops everything.
  void Clear() ABSL_LOCKS_EXCLUDED(mu_);
  // Whether spans of `step` are recorded. Two relaxed loads.
  bool Covers(uint64_t step) const {
    return step < end_.load(std::memory_order_relaxed) &&
           step >= begin_.load(std::memory_order_relaxed);
  }
  // The window set last ("" job id when none).
  TraceWindow window() const ABSL_LOCKS_EXCLUDED(mu_);

  // Keeps `span` (or counts it as dropped past the cap).
  void Add(const TraceSpan& span) ABSL_LOCKS_EXCLUDED(mu_);
  // Widens the kept span of the same kind, step, worker and all_workers to
  // cover `span` too, or keeps `span` when there is none: one span for a
  // step applied chunk by chunk.
  void AddMerged(const TraceSpan& span) ABSL_LOCKS_EXCLUDED(mu_);

  // The caller started step `step` (a trainer): the window is complete once
  // a step past its end started (Complete()): by then even an overlapped
  // step's exchanges of the window's last step are in. A run that ended
  // passes UINT64_MAX.
  void Reached(uint64_t step) {
    uint64_t seen = reached_.load(std::memory_order_relaxed);
    while (step > seen && !reached_.compare_exchange_weak(
                              seen, step, std::memory_order_relaxed)) {
    }
  }
  bool Complete() const {
    const uint64_t end = end_.load(std::memory_order_relaxed);
    return end > 0 && reached_.load(std::memory_order_relaxed) > end;
  }

  // A copy of the window and spans.
  Snapshot Copy() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const size_t max_spans_;
  std::atomic<uint64_t> begin_{0};
  std::atomic<uint64_t> end_{0};  // 0: no window
  std::atomic<uint64_t> reached_{0};
  mutable absl::Mutex mu_;
  TraceWindow window_ ABSL_GUARDED_BY(mu_);
  std::vector<TraceSpan> spans_ ABSL_GUARDED_BY(mu_);
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ps

#endif  // COMMON_TRACE_RECORDER_H_
