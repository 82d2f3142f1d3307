// RequestHandle: names one request that a client of the shards started
// (AsyncPsClient, SparseClient, JoinedWorker). Every such client has one
// shape: Start returns at once with a handle; Wait(handle, deadline)
// collects the request's status, Cancel(handle) ends it early, Detach(handle)
// says nobody will wait; an optional callback in the request runs once it is
// over, before Wait returns.
//
//   RequestHandle h = client->Start(std::move(request));
//   ... compute ...
//   PS_RETURN_IF_ERROR(client->Wait(h, absl::Now() + absl::Seconds(60)));
//
// RequestTracker keeps the handles' side of that contract for a client
// whose requests report their end themselves (the sparse clients).
#ifndef WORKER_CLIENT_REQUEST_HANDLE_H_
#define WORKER_CLIENT_REQUEST_HANDLE_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ps {

// Names one started request of one client. Each handle must be given to
// exactly one of Wait (until it returns other than DEADLINE_EXCEEDED) or
// Detach. A default-constructed handle (id 0) names no request.
class RequestHandle {
 public:
  RequestHandle() = default;
  // For clients: ids are theirs to give out, never 0.
  explicit RequestHandle(uint64_t id) : id_(id) {}
  uint64_t id() const { return id_; }

 private:
  uint64_t id_ = 0;
};

// The handles of one client's requests, from Open to Wait or Detach.
// Thread-safe; Wait blocks, nothing else does.
class RequestTracker {
 public:
  // A request starts: its handle. `what` names it in Wait's errors
  // ("sparse step 3").
  RequestHandle Open(std::string what) ABSL_LOCKS_EXCLUDED(mu_);
  // The request of `handle` is over with `status` (its callback ran).
  // Forgets a detached handle.
  void Close(RequestHandle handle, absl::Status status)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until the request is over or `deadline` passes. Over: returns
  // its status and forgets the handle. Deadline first: DEADLINE_EXCEEDED;
  // the request carries on. An unknown, detached or already waited handle:
  // kInvalidArgument.
  absl::Status Wait(RequestHandle handle, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Nobody will Wait: the handle is forgotten once the request is over.
  void Detach(RequestHandle handle) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    bool over = false;
    bool detached = false;
    std::string what;
    absl::Status status;
  };

  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // WORKER_CLIENT_REQUEST_HANDLE_H_
