#include "common/trace_recorder.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace ps {

int64_t TraceRecorder::NowNs() { return absl::GetCurrentTimeNanos(); }

void TraceRecorder::SetWindow(const TraceWindow& window) {
  absl::MutexLock lock(&mu_);
  if (window.job_id() == window_.job_id() &&
      window.begin_step() == window_.begin_step() &&
      window.end_step() == window_.end_step()) {
    return;
  }
  // Closed first: a racing Covers sees no window rather than a mixed one.
  end_.store(0, std::memory_order_relaxed);
  begin_.store(window.begin_step(), std::memory_order_relaxed);
  end_.store(window.end_step(), std::memory_order_relaxed);
  reached_.store(0, std::memory_order_relaxed);
  window_ = window;
  spans_.clear();
  dropped_ = 0;
}

void TraceRecorder::Clear() {
  absl::MutexLock lock(&mu_);
  end_.store(0, std::memory_order_relaxed);
  begin_.store(0, std::memory_order_relaxed);
  reached_.store(0, std::memory_order_relaxed);
  window_.Clear();
  spans_.clear();
  dropped_ = 0;
}

TraceWindow TraceRecorder::window() const {
  absl::MutexLock lock(&mu_);
  return window_;
}

void TraceRecorder::Add(const TraceSpan& span) {
  absl::MutexLock lock(&mu_);
  if (spans_.size() >= max_spans_) {
    ++dropped_;
    return;
  }
  spans_.push_back(span);
}

void TraceRecorder::AddMerged(const TraceSpan& span) {
  absl::MutexLock lock(&mu_);
  // The step's span is among the last few: look back a little only.
  constexpr size_t kLookBack = 64;
  const size_t stop = spans_.size() > kLookBack ? spans_.size() - kLookBack : 0;
  for (size_t i = spans_.size(); i-- > stop;) {
    TraceSpan& s = spans_[i];
    if (s.kind() == span.kind() && s.step() == span.step() &&
        s.worker() == span.worker() && s.all_workers() == span.all_workers()) {
      s.set_start_ns(std::min(s.start_ns(), span.start_ns()));
      s.set_end_ns(std::max(s.end_ns(), span.end_ns()));
      return;
    }
  }
  if (spans_.size() >= max_spans_) {
    ++dropped_;
    return;
  }
  spans_.push_back(span);
}

TraceRecorder::Snapshot TraceRecorder::Copy() const {
  absl::MutexLock lock(&mu_);
  Snapshot s;
  s.window = window_;
  s.spans = spans_;
  s.dropped = dropped_;
  return s;
}

}  // namespace ps
