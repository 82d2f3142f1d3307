// StoreSync: keeps a JobStore (job_store.h) equal to the coordinator's
// JobTable and WorkerRegistry. Flush compares each unfinished job and each
// worker with what it last stored and commits the differences, with the
// queued progress history rows, in one transaction; Restore fills empty
// tables from the store.
//
//   StoreSync sync(store);                   // null store: all no-ops
//   PS_RETURN_IF_ERROR(sync.Restore(now, jobs, workers));
//   ... change jobs and workers ...
//   sync.AddProgress(job.id(), report.progress());
//   PS_RETURN_IF_ERROR(sync.Flush(jobs, workers));   // before answering
//
// A failed Flush changes nothing it remembers, so the next Flush writes the
// same differences again (and whatever changed since); only the queued
// history rows are dropped then, so that a full disk does not make them pile
// up (a job's latest progress lives in its status and is kept).
#ifndef SERVER_COORDINATOR_STORE_SYNC_H_
#define SERVER_COORDINATOR_STORE_SYNC_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"
#include "server/coordinator/job_store.h"
#include "server/coordinator/job_table.h"
#include "server/coordinator/worker_registry.h"

namespace ps {

// Not thread-safe: the owner serializes every call (JobCoordinator holds its
// mutex).
class StoreSync {
 public:
  // `store` is borrowed and must outlive this; null disables every call.
  explicit StoreSync(JobStore* store) : store_(store) {}

  bool enabled() const { return store_ != nullptr; }

  // Loads the store into `jobs` and `workers`, which must be empty; the
  // workers count as seen at `now` and are marked `restored`. The store's
  // error (naming its file) when it cannot be read.
  absl::Status Restore(absl::Time now, JobTable& jobs, WorkerRegistry& workers);

  // Queues a history row for the next Flush.
  void AddProgress(const std::string& job_id, const Progress& progress);

  // Commits what changed since the last successful Flush. The store's
  // error (UNAVAILABLE naming its file) when the commit fails.
  absl::Status Flush(const JobTable& jobs, const WorkerRegistry& workers);

 private:
  JobStore* const store_;
  // What was last stored: a job's mutable record (state, reason, progress,
  // ranks) and a worker's fields, as bytes to compare.
  absl::flat_hash_map<std::string, std::string> job_stored_;
  absl::flat_hash_map<std::string, std::string> worker_stored_;
  // Jobs stored in an end state: they never change again.
  absl::flat_hash_set<std::string> settled_;
  std::vector<std::pair<std::string, Progress>> progress_;
  uint64_t next_job_ = 0;
  uint64_t next_worker_seq_ = 0;
};

}  // namespace ps

#endif  // SERVER_COORDINATOR_STORE_SYNC_H_
