#include "worker/client/request_handle.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace ps {

RequestHandle RequestTracker::Open(std::string what) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  entries_[id].what = std::move(what);
  return RequestHandle(id);
}

void RequestTracker::Close(RequestHandle handle, absl::Status status) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(handle.id());
  if (it == entries_.end()) return;
  if (it->second.detached) {
    entries_.erase(it);
    return;
  }
  it->second.over = true;
  it->second.status = std::move(status);
}

absl::Status RequestTracker::Wait(RequestHandle handle, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(handle.id());
  if (it == entries_.end() || it->second.detached) {
    return absl::InvalidArgumentError(absl::StrCat(
        "handle ", handle.id(), ": unknown, detached or already waited"));
  }
  const uint64_t id = handle.id();
  // Re-found on each check: Open may move the entries (flat_hash_map).
  auto settled = [this, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto found = entries_.find(id);
    return found == entries_.end() || found->second.over;
  };
  const bool over = mu_.AwaitWithDeadline(absl::Condition(&settled), deadline);
  it = entries_.find(id);
  if (!over) {
    return absl::DeadlineExceededError(
        absl::StrCat("request ", id, " (", it->second.what,
                     "): not over by the deadline; still running"));
  }
  if (it == entries_.end()) {  // detached meanwhile (a caller's bug)
    return absl::InvalidArgumentError(
        absl::StrCat("handle ", id, ": detached while waited for"));
  }
  absl::Status status = std::move(it->second.status);
  entries_.erase(handle.id());
  return status;
}

void RequestTracker::Detach(RequestHandle handle) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(handle.id());
  if (it == entries_.end()) return;
  if (it->second.over) {
    entries_.erase(it);
  } else {
    it->second.detached = true;
  }
}

}  // namespace ps
