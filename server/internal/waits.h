// Waiting pulls: how a PushPull or Pull that must wait (for a BSP step, an
// SSP clock or a durable checkpoint) is filed, answered, failed at its
// deadline or when its job closes. Internal to the shard (server/shard.h
// draws the life cycle of a wait).
//
//   WaiterPtr w = NewWaiter(job, id, chunks, step, resp->mutable_parameters(),
//                           payloads, std::move(done));
//   SetPushPullConditions(*job, step, w.get());   // consistency.h
//   StartWait(job, std::move(w));                 // may answer at once
//
// Thread safety: every function may run concurrently on any thread; none
// blocks. `done` callbacks run under no lock (Complete, Fail, CompleteAll,
// CloseJob, FailExpiredWaits run them on the calling thread).
#ifndef SERVER_INTERNAL_WAITS_H_
#define SERVER_INTERNAL_WAITS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/internal/job.h"

namespace ps {
namespace internal {

// A wait on `chunks` of `job` (answer into `out`, and `payloads` when not
// null), due within the job's step deadline. Conditions are set by the
// caller (consistency.h) before StartWait.
WaiterPtr NewWaiter(const std::shared_ptr<Job>& job, uint64_t id,
                    std::vector<Chunk*> chunks, uint64_t step,
                    ChunkDataList* out, std::vector<SharedBytes>* payloads,
                    std::function<void(absl::Status)> done);

// Files `w` under each unmet condition and completes it when none is left
// (possibly at once, on this thread). Fails it when the job is closed.
void StartWait(const std::shared_ptr<Job>& job, WaiterPtr w);

// Claims `w` and answers it with parameters / with `status`. A no-op when
// another path claimed it first. No lock may be held.
void Complete(const WaiterPtr& w);
void Fail(const WaiterPtr& w, const absl::Status& status);
// Completes every wait in `ready` and clears it.
void CompleteAll(std::vector<WaiterPtr>* ready);

// Fails every wait of `job` with `status` and refuses new ones.
void CloseJob(Job& job, const absl::Status& status);

// Fails every wait of `job` whose deadline is <= now with
// DEADLINE_EXCEEDED naming what it waits for.
void FailExpiredWaits(Job& job, absl::Time now);

// Moves the waits of `list` that `satisfied(w)` releases to `ready` when
// that was their last unmet condition; drops claimed ones from the list.
template <typename Satisfied>
void ReleaseWaiters(std::vector<WaiterPtr>* list, Satisfied satisfied,
                    std::vector<WaiterPtr>* ready) {
  auto keep = list->begin();
  for (WaiterPtr& w : *list) {
    if (w->claimed.load(std::memory_order_acquire)) continue;
    if (satisfied(*w)) {
      if (w->pending.fetch_sub(1) == 1) ready->push_back(std::move(w));
      continue;
    }
    *keep++ = std::move(w);
  }
  list->erase(keep, list->end());
}

// Moves the SSP waits that the current clocks satisfy to `ready`.
void ReleaseClockWaiters(Job& job, std::vector<WaiterPtr>* ready)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.waits.mu);

// Whether every live backup of `c` holds version `need` (c.replicated,
// and the initial state: Chunk::initial_replicated).
inline bool ReplicatedTo(const Chunk& c, uint64_t need) {
  return c.replicated.load() >= need && c.initial_replicated.load();
}

// Moves the waits that c.replicated now covers (Waiter::need_replicated)
// to `ready`.
void ReleaseReplicaWaiters(Chunk& c, std::vector<WaiterPtr>* ready)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);

// Moves the waits that waits.durable_version now covers to `ready`.
void ReleaseDurableWaiters(Job& job, std::vector<WaiterPtr>* ready)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.waits.mu);

}  // namespace internal
}  // namespace ps

#endif  // SERVER_INTERNAL_WAITS_H_
