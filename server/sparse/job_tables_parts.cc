// JobTables' split steps (SparseExchangeRequest.part/parts): the parts are
// held in StepParts until the last one is in, then the step is pushed once
// under the job's consistency rules (server/sparse/job_tables.h).
#include <algorithm>
#include <utility>

#include "common/status_macros.h"
#include "server/sparse/job_tables.h"

namespace ps {

using sparse_internal::Answer;
using sparse_internal::SplitPart;
using sparse_internal::StepParts;
using sparse_internal::TablePushes;
using sparse_internal::WaiterPtr;

namespace {

// What a held part costs beyond its rows: the request its wait holds.
constexpr uint64_t kPartOverheadBytes = 256;

// `waiters` less `self`, into `out` (the caller fails `self` itself).
void AllBut(const std::vector<WaiterPtr>& waiters, const WaiterPtr& self,
            std::vector<WaiterPtr>* out) {
  for (const WaiterPtr& w : waiters) {
    if (w != self) out->push_back(w);
  }
}

}  // namespace

void JobTables::ExchangePart(const SparseRequestIn& req, TablePushes pushed,
                             const WaiterPtr& waiter) {
  SplitPart part;
  part.worker = req.worker;
  part.step = req.step;
  part.part = req.part;
  part.parts = req.parts;
  part.bytes = pushed.bytes + kPartOverheadBytes;
  for (const SparseRowsIn& p : req.pull) part.bytes += p.ids_bytes;
  part.pushed = std::move(pushed);
  part.waiter = waiter;
  std::vector<WaiterPtr> ready, failed_waits;
  absl::Status failed;
  if (mode_ != BSP) {
    failed = PushPartUnordered(std::move(part), &ready, &failed_waits);
  } else {
    absl::MutexLock l(&mu_);
    failed = closed_;
    if (failed.ok()) failed = PausedLocked(part.step);
    if (failed.ok()) {
      failed = PushPartBspLocked(std::move(part), &ready, &failed_waits);
    }
  }
  for (auto& w : failed_waits) w->done(failed);
  if (!failed.ok()) {
    waiter->done(failed);
    return;
  }
  for (auto& w : ready) Answer(*tables_, *w);
}

absl::Status JobTables::PushPartBspLocked(SplitPart part,
                                          std::vector<WaiterPtr>* ready,
                                          std::vector<WaiterPtr>* failed) {
  const uint32_t w = part.worker;
  const WaiterPtr waiter = part.waiter;
  if (!barrier_.active(w)) return NotActive(w);
  const uint64_t version = barrier_.version();
  if (part.step > version) return AheadError(part.step, version);
  // The step is applied, or this worker's push of it is buffered: the part
  // is a retry, answered as a whole push's retry is. So are the parts held
  // for it (a step completed without this worker, backup_workers): they
  // would otherwise wait for a set that can no longer apply.
  const bool stale = part.step < version;
  if (stale || barrier_.HasPushed(w)) {
    std::vector<WaiterPtr> answer = parts_.Take(w, part.step);
    answer.push_back(waiter);
    for (const WaiterPtr& x : answer) {
      (stale ? x->resp->stale : x->resp->duplicate) = true;
      AddWaitLocked(x);
    }
    CollectReadyLocked(ready);
    return absl::OkStatus();
  }
  PS_ASSIGN_OR_RETURN(StepParts::Added added,
                      parts_.Add(std::move(part), failed));
  if (added.duplicate) waiter->resp->duplicate = true;
  if (!added.complete) return absl::OkStatus();
  barrier_.Buffer(w, std::move(added.merged));
  const absl::Status s = MaybeCompleteStepLocked();
  if (!s.ok()) {
    // The step did not apply: its parts' waits and the others beyond it
    // fail with it, as an unsplit push's would.
    AllBut(added.waiters, waiter, failed);
    waits_.TakeBeyond(barrier_.version(), failed);
    return s;
  }
  for (const WaiterPtr& x : added.waiters) AddWaitLocked(x);
  CollectReadyLocked(ready);
  return absl::OkStatus();
}

absl::Status JobTables::PushPartUnordered(SplitPart part,
                                          std::vector<WaiterPtr>* ready,
                                          std::vector<WaiterPtr>* failed) {
  const uint32_t w = part.worker;
  const uint64_t step = part.step;
  const WaiterPtr waiter = part.waiter;
  absl::ReaderMutexLock applying(&apply_mu_);
  // Replicated: held through ApplyClaimed (PushUnordered).
  absl::MutexLockMaybe in_order(ordered_.load() ? &order_mu_ : nullptr);
  uint64_t claimed_before = 0;
  float scale = 1.0f;
  StepParts::Added added;
  {
    absl::MutexLock l(&mu_);
    PS_RETURN_IF_ERROR(closed_);
    if (!barrier_.active(w)) return NotActive(w);
    if (barrier_.Claimed(w, step)) {
      // Applied (or being applied) already, or older than a step applied:
      // a retry, and so are the parts held for it.
      std::vector<WaiterPtr> answer = parts_.Take(w, step);
      answer.push_back(waiter);
      for (const WaiterPtr& x : answer) {
        x->resp->duplicate = true;
        AddWaitLocked(x);
      }
      CollectReadyLocked(ready);
      return absl::OkStatus();
    }
    PS_ASSIGN_OR_RETURN(added, parts_.Add(std::move(part), failed));
    if (added.duplicate) waiter->resp->duplicate = true;
    if (!added.complete) return absl::OkStatus();
    // Claimed in the same critical section that completed the set, so a
    // retried part arriving from now on is a duplicate, never a new set.
    barrier_.Claim(w, step, &claimed_before);
    scale = AspScaleLocked();
  }
  absl::Status s = ApplyClaimed(w, step, claimed_before, scale,
                                std::move(added.merged), added.waiters, ready);
  if (!s.ok()) AllBut(added.waiters, waiter, failed);
  return s;
}

}  // namespace ps
