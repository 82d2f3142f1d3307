#include "server/internal/held_pushes.h"

#include <utility>

#include "server/internal/job.h"

namespace ps {
namespace internal {

HeldPushes::Outcome HeldPushes::Hold(HeldPush push, ConsistencyMode mode,
                                     const std::atomic<uint64_t>& pause_step) {
  absl::MutexLock l(&mu_);
  if (closed_ || absl::Now() >= push.until) return kAnswer;
  if (!PushPaused(mode, push.step,
                  pause_step.load(std::memory_order_seq_cst))) {
    return kResume;
  }
  held_.push_back(std::move(push));
  return kHeld;
}

void HeldPushes::ResumeAll() {
  std::vector<HeldPush> held;
  {
    absl::MutexLock l(&mu_);
    held.swap(held_);
  }
  for (HeldPush& h : held) h.resume();
}

void HeldPushes::Close(const absl::Status& status) {
  std::vector<HeldPush> held;
  {
    absl::MutexLock l(&mu_);
    closed_ = true;
    held.swap(held_);
  }
  for (HeldPush& h : held) h.answer(status);
}

void HeldPushes::Expire(absl::Time now) {
  std::vector<HeldPush> expired;
  {
    absl::MutexLock l(&mu_);
    auto keep = held_.begin();
    for (auto it = held_.begin(); it != held_.end(); ++it) {
      if (it->until <= now) {
        expired.push_back(std::move(*it));
      } else {
        if (keep != it) *keep = std::move(*it);
        ++keep;
      }
    }
    held_.erase(keep, held_.end());
  }
  for (HeldPush& h : expired) h.answer(h.paused);
}

size_t HeldPushes::size() const {
  absl::MutexLock l(&mu_);
  return held_.size();
}

}  // namespace internal
}  // namespace ps
