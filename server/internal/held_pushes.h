// Pushes that a live re-placement's pause refused (internal/reshard.h,
// PushPaused), held at the shard until the pause moves on instead of
// answered UNAVAILABLE at once. Answered at once, the worker would send the
// whole payload again after a backoff that doubles while the chunks are
// copied, and would learn of the commit only at its next try; held, the
// push runs again the moment the pause is lifted (ABORT) or moved (a new
// PAUSE), and a COMMIT answers it ABORTED (the job was re-placed) at once.
//
//   HeldPush h{step, until, [=] { shard->PushPull(...again...); }, done,
//              paused_status};
//   switch (job.held_pushes.Hold(std::move(h), job.mode, job.pause_step)) {
//     case HeldPushes::kHeld: return;            // resumed or answered later
//     case HeldPushes::kResume: ...run again...  // the pause has moved on
//     case HeldPushes::kAnswer: done(paused_status);
//   }
//   // whoever moves the job's pause: store it, then
//   job.held_pushes.ResumeAll();
//
// Exactly one of a held push's `resume` and `answer` runs, once, outside
// the lock: by ResumeAll, by Close (the job closed: re-placed, dropped, the
// shard shutting down), or by Expire once `until` passed (answered with its
// paused error: the worker retries as before). Thread-safe.
#ifndef SERVER_INTERNAL_HELD_PUSHES_H_
#define SERVER_INTERNAL_HELD_PUSHES_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/job.pb.h"

namespace ps {
namespace internal {

// The longest a paused push is held, whatever the call's own deadline.
inline constexpr absl::Duration kMaxPauseHold = absl::Seconds(5);

struct HeldPush {
  uint64_t step = 0;
  absl::Time until;              // answered with `paused` from then on
  std::function<void()> resume;  // the push again, from the start
  std::function<void(absl::Status)> answer;
  absl::Status paused;  // the pause's refusal (UNAVAILABLE)
};

class HeldPushes {
 public:
  enum Outcome {
    kHeld,    // held: resumed or answered later
    kResume,  // the pause no longer covers it: the caller runs it again
    kAnswer,  // closed, or `until` passed: the caller answers `paused`
  };

  // Holds `push` while `pause_step` still pauses a push of its step under
  // `mode` (read under the lock ResumeAll takes, after the store that moved
  // the pause: a push is either held before and resumed, or sees the move).
  Outcome Hold(HeldPush push, ConsistencyMode mode,
               const std::atomic<uint64_t>& pause_step);
  // Runs every held push again (their `resume`): call after storing a new
  // pause_step (lifted, or moved to another step).
  void ResumeAll();
  // Answers every held push with `status` and holds none from now on.
  void Close(const absl::Status& status);
  // Answers the pushes held until `now` or before with their `paused`.
  void Expire(absl::Time now);
  size_t size() const;

 private:
  mutable absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<HeldPush> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace internal
}  // namespace ps

#endif  // SERVER_INTERNAL_HELD_PUSHES_H_
