// SerialExecutor: runs closures one at a time on its own thread.
//
//   SerialExecutor exec;
//   exec.Schedule([&] { coordinator->SubmitJob(req, &resp);
//   reactor->Finish(...); });
//
// The coordinator's mutating calls may block on RPCs to the shards (this
// very process among them); running them here keeps gRPC's callback threads
// free, so a call from a handler back into this server cannot starve.
#ifndef SERVER_RPC_SERIAL_EXECUTOR_H_
#define SERVER_RPC_SERIAL_EXECUTOR_H_

#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ps {

// Thread-safe. The destructor runs what is queued, then joins.
class SerialExecutor {
 public:
  SerialExecutor() : thread_([this] { Loop(); }) {}
  ~SerialExecutor() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    thread_.join();
  }
  SerialExecutor(const SerialExecutor&) = delete;
  SerialExecutor& operator=(const SerialExecutor&) = delete;

  void Schedule(std::function<void()> fn) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(fn));
  }

 private:
  void Loop() {
    while (true) {
      std::function<void()> fn;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](SerialExecutor* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu_) {
              return e->stopping_ || !e->queue_.empty();
            },
            this));
        if (queue_.empty()) return;  // stopping, and nothing left
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      fn();
    }
  }

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts after the members it uses
};

}  // namespace ps

#endif  // SERVER_RPC_SERIAL_EXECUTOR_H_
