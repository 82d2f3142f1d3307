// WorkerRegistry: the coordinator's live workers: registration order and
// ids, when each last called, the job rank it holds, the reason its job was
// aborted, and its parked GetAssignment long-poll.
//
//   WorkerRegistry workers;
//   WorkerRegistry::Worker& w = workers.Add("host-a", now);     // "w-1"
//   workers.AssignRank(w, "job-000001", /*rank=*/0, /*start_step=*/0);
//   CompletedPolls done;
//   workers.ExpirePolls(now, done);
//   for (const auto& s : workers.Silent(now, timeout)) ... lose s.id ...
//   ... unlock ...
//   done.Run();
//
// A lost worker is removed (Remove); a worker of the same name registering
// again gets a new id. What losing a worker does to its job is the job
// table's business (job_table.h).
#ifndef SERVER_COORDINATOR_WORKER_REGISTRY_H_
#define SERVER_COORDINATOR_WORKER_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"

namespace ps {

// Long-poll callbacks completed under the coordinator's lock, to be run
// after it is released (a callback may call back into the coordinator).
// Not thread-safe.
class CompletedPolls {
 public:
  void Add(std::function<void(absl::Status)> done, absl::Status status);
  // Runs every callback, oldest first, and forgets them.
  void Run();

 private:
  std::vector<std::pair<std::function<void(absl::Status)>, absl::Status>> done_;
};

// Not thread-safe: the owner serializes every call (JobCoordinator holds its
// mutex). Worker pointers stay valid until Remove.
class WorkerRegistry {
 public:
  struct Worker {
    std::string id;
    std::string name;
    uint64_t seq = 0;  // registration order
    absl::Time last_seen;
    // The job this worker holds a rank of; "" = idle.
    std::string job_id;
    // The one job this worker joined (RegisterWorkerRequest.job_id, a
    // custom model's Python worker); "" = any job of a built-in model.
    std::string joined_job;
    uint32_t rank = 0;
    uint64_t start_step = 0;
    // Non-empty: the job it ran failed or was cancelled; said on Heartbeat
    // until the worker asks for new work.
    std::string abort_reason;
    // Reloaded from the job store and not heard from since.
    bool restored = false;
    // Its RegisterWorker has not answered yet (the call runs the shard
    // operations it started, e.g. a big job's RegisterJob on every shard):
    // it cannot heartbeat before it has its id, so it is never silent.
    bool registering = false;
    // The parked long-poll, if any.
    std::function<void(absl::Status)> poll_done;
    GetAssignmentResponse* poll_response = nullptr;
    absl::Time poll_deadline;
  };
  // A worker silent for at least the timeout.
  struct Silent {
    std::string id;
    absl::Duration silent;
  };

  // A new idle worker with the next id ("w-1", "w-2", ...), seen at `now`.
  Worker& Add(const std::string& name, absl::Time now);
  // Puts back a stored worker with its id and registration order, seen at
  // `now` (the caller fills in the rest). set_next_seq continues the ids.
  Worker& Restore(const std::string& id, const std::string& name, uint64_t seq,
                  absl::Time now);
  uint64_t next_seq() const { return next_seq_; }
  void set_next_seq(uint64_t next) { next_seq_ = next; }
  // Every worker, in registration order.
  std::vector<const Worker*> InOrder() const;
  // Null when unknown or lost.
  Worker* Find(const std::string& id);
  // The worker, which leaves the registry (its parked poll still set).
  std::unique_ptr<Worker> Remove(const std::string& id);
  size_t size() const { return workers_.size(); }

  // Ids of the workers registered under `name`.
  std::vector<std::string> IdsNamed(const std::string& name) const;
  // Idle workers, in registration order.
  std::vector<Worker*> IdleInOrder();
  // Workers silent for `timeout` or more at `now`, in registration order
  // (so that outcomes never depend on hash order).
  std::vector<Silent> SilentAt(absl::Time now, absl::Duration timeout) const;

  // Makes the worker hold `rank` of `job_id`, starting at `start_step`.
  static void AssignRank(Worker& worker, const std::string& job_id,
                         uint32_t rank, uint64_t start_step);
  // Frees the listed workers that still hold a rank of `job_id`; a
  // non-empty `abort_reason` is said on their heartbeats.
  void ReleaseFromJob(const std::vector<std::string>& worker_ids,
                      const std::string& job_id,
                      const std::string& abort_reason);

  // Parks a long-poll until `deadline`; `response` must stay valid until
  // the poll completes.
  static void Park(Worker& worker, GetAssignmentResponse* response,
                   std::function<void(absl::Status)> done, absl::Time deadline);
  // Completes the worker's parked poll, if any, with `status`.
  static void CompletePoll(Worker& worker, absl::Status status,
                           CompletedPolls& done);
  // Completes (OK, no assignment) the parked polls whose deadline passed.
  void ExpirePolls(absl::Time now, CompletedPolls& done);
  // Completes every parked poll with `status`.
  void CompleteAllPolls(const absl::Status& status, CompletedPolls& done);

 private:
  // Live workers only; a lost worker is erased.
  absl::flat_hash_map<std::string, std::unique_ptr<Worker>> workers_;
  uint64_t next_seq_ = 1;
};

}  // namespace ps

#endif  // SERVER_COORDINATOR_WORKER_REGISTRY_H_
