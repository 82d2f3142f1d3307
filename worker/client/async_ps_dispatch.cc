// How AsyncPsClient's requests end: Wait and Detach, and the dispatch
// thread that sends retries after their backoff and finishes the requests
// whose calls all ended (slices released, callback run). Starting requests
// and their calls on the wire: async_ps_client.cc.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "worker/client/async_ps_client.h"
#include "worker/client/async_ps_request.h"

namespace ps {

using async_ps_internal::OpName;

void AsyncPsClient::Detach(RequestHandle handle) {
  absl::MutexLock lock(&mu_);
  auto it = requests_.find(handle.id());
  if (it == requests_.end()) return;
  if (it->second->over) {
    requests_.erase(it);
  } else {
    it->second->detached = true;
  }
}

absl::Status AsyncPsClient::Wait(RequestHandle handle, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto it = requests_.find(handle.id());
  if (it == requests_.end() || it->second->detached) {
    return absl::InvalidArgumentError(absl::StrCat(
        "handle ", handle.id(), ": unknown, detached or already waited"));
  }
  Request* r = it->second.get();
  r->waited = true;
  auto ready = [r] {
    return r->over || (r->ended && !r->claimed && r->FinishedByWaiter());
  };
  bool in_time = mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  if (in_time && !r->over) {
    // Finished here, in the waiting thread: the blocking path then costs
    // one thread hop (gRPC's callback thread to this one), as before.
    r->claimed = true;
    ended_.erase(std::remove(ended_.begin(), ended_.end(), r), ended_.end());
    mu_.Unlock();
    const bool released = ReleaseCalls(r, deadline);
    mu_.Lock();
    if (released) {
      MarkOver(r);
    } else {
      r->claimed = false;  // the dispatch thread finishes it
      in_time = false;
    }
  }
  r->waited = false;
  if (!in_time) {
    if (r->ended && !r->claimed &&
        std::find(ended_.begin(), ended_.end(), r) == ended_.end()) {
      ended_.push_back(r);
    }
    Wake();
    return absl::DeadlineExceededError(absl::StrCat(
        "request ", r->id, " (", OpName(r->args.op), " of step ", r->args.step,
        "): not over by the deadline; still running"));
  }
  absl::Status status = r->status;
  requests_.erase(handle.id());
  return status;
}

void AsyncPsClient::DropWire(Request* r) {
  // Ended calls are off the wire: dropping their contexts and requests
  // lets gRPC release the slices borrowing the gradient.
  for (auto& call : r->calls) {
    call->context.reset();
    call->wire_request.Clear();
  }
}

bool AsyncPsClient::ReleaseCalls(Request* r, absl::Time deadline) {
  DropWire(r);
  absl::MutexLock lock(&borrow_mu_);
  auto released = [r]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(borrow_mu_) {
    return r->borrowed == 0;
  };
  return borrow_mu_.AwaitWithDeadline(absl::Condition(&released), deadline);
}

void AsyncPsClient::MarkOver(Request* r) {
  r->over = true;
  if (--active_ == 0 && stopping_) Wake();
  if (r->detached) requests_.erase(r->id);
}

bool AsyncPsClient::TryFinish(Request* r) {
  {
    absl::MutexLock lock(&borrow_mu_);
    if (r->borrowed > 0) return false;
  }
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    status = r->status;
  }
  if (r->args.done) r->args.done(status);
  absl::MutexLock lock(&mu_);
  MarkOver(r);
  return true;
}

// The loop of the dispatch thread. Sleeps until woken (a call ended, a
// slice was released, a request started or was cancelled) or the next
// retry is due.
void AsyncPsClient::Dispatch() {
  std::vector<Request*> finishing;  // ended; waiting for their slices
  absl::Time next_retry = absl::InfiniteFuture();
  while (true) {
    {
      absl::MutexLock lock(&wake_mu_);
      wake_mu_.AwaitWithDeadline(absl::Condition(&wake_), next_retry);
      wake_ = false;
    }
    std::vector<Request*> ended;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time now = absl::Now();
      next_retry = absl::InfiniteFuture();
      std::vector<Call*> waiting;
      for (Call* call : backoff_) {
        if (call->retry_at > now) {
          next_retry = std::min(next_retry, call->retry_at);
          waiting.push_back(call);
          continue;
        }
        call->state = Call::State::kQueued;
        queues_[call->group.shard].emplace(call->queue_key, call);
      }
      backoff_.swap(waiting);
      Pump();
      // What a blocked Wait finishes, or already claimed, stays with it.
      for (Request* r : ended_) {
        if (r->claimed || r->FinishedByWaiter()) continue;
        r->claimed = true;
        ended.push_back(r);
      }
      ended_.clear();
    }
    for (Request* r : ended) {
      DropWire(r);  // TryFinish waits for the slices
      finishing.push_back(r);
    }
    finishing.erase(std::remove_if(finishing.begin(), finishing.end(),
                                   [this](Request* r) { return TryFinish(r); }),
                    finishing.end());
    absl::MutexLock lock(&mu_);
    if (stopping_ && active_ == 0) return;
  }
}

}  // namespace ps
