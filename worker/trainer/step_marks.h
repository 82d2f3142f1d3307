// StepMarks: the wall-clock marks of one training step for its timeline
// (psctl trace), shared by the dense and the CTR trainers. Does nothing
// unless the recorder covers the step: one relaxed load pair per step.
//
//   StepMarks marks(options_.tracer, t);   // tells the recorder Reached(t)
//   ... wait for the batch ...
//   marks.Phase(TRACE_DATA_WAIT);          // from the last mark to now
//   ... compute ...
//   marks.Phase(TRACE_COMPUTE);
//   marks.Finish();                        // TRACE_STEP, the whole step
#ifndef WORKER_TRAINER_STEP_MARKS_H_
#define WORKER_TRAINER_STEP_MARKS_H_

#include <cstdint>

#include "common/trace_recorder.h"
#include "proto/trace.pb.h"

namespace ps {

class StepMarks {
 public:
  // `recorder` may be null (no timelines).
  StepMarks(TraceRecorder* recorder, uint64_t step) : step_(step) {
    if (recorder == nullptr) return;
    recorder->Reached(step);
    if (!recorder->Covers(step)) return;
    recorder_ = recorder;
    start_ = mark_ = TraceRecorder::NowNs();
  }
  bool traced() const { return recorder_ != nullptr; }
  // The recorder while the step is traced, else null.
  TraceRecorder* recorder() const { return recorder_; }
  uint64_t step() const { return step_; }
  // A span of `kind` from the last mark to now; now is the next mark.
  void Phase(TraceSpanKind kind) {
    if (recorder_ == nullptr) return;
    const int64_t now = TraceRecorder::NowNs();
    Add(kind, mark_, now);
    mark_ = now;
  }
  void Add(TraceSpanKind kind, int64_t start_ns, int64_t end_ns) const {
    if (recorder_ == nullptr) return;
    TraceSpan span;
    span.set_kind(kind);
    span.set_step(step_);
    span.set_start_ns(start_ns);
    span.set_end_ns(end_ns);
    recorder_->Add(span);
  }
  // The whole step, from construction to now.
  void Finish() const { Add(TRACE_STEP, start_, TraceRecorder::NowNs()); }

 private:
  TraceRecorder* recorder_ = nullptr;
  const uint64_t step_;
  int64_t start_ = 0;
  int64_t mark_ = 0;
};

}  // namespace ps

#endif  // WORKER_TRAINER_STEP_MARKS_H_
