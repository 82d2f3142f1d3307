// JobStore: the coordinator's durable state in an embedded SQLite database
// (PsdConfig.state_dir/jobs.sqlite): every job (spec, placement, state,
// reason, times, final progress, its ranks and their workers), the worker
// registry (ids, names, the rank each holds) and each job's progress
// history. A restarted coordinator loads it and carries on.
//
//   JobStore::Options options;
//   options.path = "/var/lib/ps/jobs.sqlite";
//   PS_ASSIGN_OR_RETURN(std::unique_ptr<JobStore> store,
//                       JobStore::Open(options));     // exit 2 on error
//   PS_ASSIGN_OR_RETURN(StoredState state, store->Load());
//   StoreChanges changes;
//   changes.jobs.push_back(job);                      // one transaction
//   PS_RETURN_IF_ERROR(store->Commit(changes));
//
// Durability: WAL journal with synchronous=FULL, so Commit returns only once
// the transaction is in the WAL on disk (one fsync of the WAL per commit;
// the database file is synced at checkpoints). NORMAL would survive a
// kill -9 but not a power cut, and the coordinator commits a handful of
// times per second at most (submits, starts, ends, workers, the leader's
// periodic progress), so the fsync is affordable. Each Commit is one
// transaction: a failure (a full disk) rolls it back and leaves the file as
// the last successful Commit left it.
//
// Schema versions (PRAGMA user_version), each reached by one migration in
// a transaction: 1 = meta, jobs, job_ranks, workers; 2 = progress history.
// A database of a newer version than kSchemaVersion is refused, never
// rewritten.
//
// Progress history: one row per (job, step) the leader reported. Once a job
// has more than Options::max_history_rows rows, every second row of its
// older half is deleted (the first row stays), so a long run keeps its
// whole span, coarser for old steps and at full detail for recent ones.
#ifndef SERVER_COORDINATOR_JOB_STORE_H_
#define SERVER_COORDINATOR_JOB_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"

struct sqlite3;

namespace ps {

// A job as stored: its status (with spec and placement) and what the
// coordinator needs to resume it.
struct StoredJob {
  struct Rank {
    std::string worker_id;  // "" once lost
    std::string worker_name;
    bool finished = false;
    bool active = false;  // counts toward the quorum
  };
  JobStatus status;
  bool registering = false;
  float leader_samples_per_s = 0;
  std::vector<Rank> ranks;  // by rank
};

// A live worker as stored (liveness is not: a reloaded worker counts as
// seen at load time).
struct StoredWorker {
  std::string id;
  std::string name;
  uint64_t seq = 0;  // registration order
  std::string job_id;
  std::string joined_job;
  uint32_t rank = 0;
  uint64_t start_step = 0;
  std::string abort_reason;
};

// Replicated jobs: the failover epoch and the shards failed over, joining
// back and rejoined (bit s = shard s; shards >= 64 are never failed over),
// in the meta table.
struct StoredReplicaView {
  uint64_t epoch = 0;
  uint64_t failed_mask = 0;
  uint64_t joining_mask = 0;
  uint64_t rejoined_mask = 0;
};

// Everything Load returns: jobs in submit order, workers in registration
// order, and the counters new ids continue from.
struct StoredState {
  std::vector<StoredJob> jobs;
  std::vector<StoredWorker> workers;
  uint64_t next_job = 1;
  uint64_t next_worker_seq = 1;
};

// One transaction's worth of changes.
struct StoreChanges {
  // Jobs not stored yet (spec and placement are written once, here).
  std::vector<StoredJob> new_jobs;
  // Stored jobs whose state, reason, progress or ranks changed.
  std::vector<StoredJob> changed_jobs;
  // Workers added or changed, and ids of workers that left the registry.
  std::vector<StoredWorker> workers;
  std::vector<std::string> removed_workers;
  // Progress history rows: (job id, the leader's report).
  std::vector<std::pair<std::string, Progress>> progress;
  std::optional<uint64_t> next_job;
  std::optional<uint64_t> next_worker_seq;
  std::optional<StoredReplicaView> replica_view;

  bool empty() const;
};

// Not thread-safe: the owner serializes every call (JobCoordinator holds its
// mutex). Holds an exclusive lock (flock on FILE.lock) for its whole life,
// so a second psd on the same file is refused at Open.
class JobStore {
 public:
  static constexpr int kSchemaVersion = 3;

  struct Options {
    // The database file; its directory is created if missing.
    std::string path;
    // Progress history rows kept per job (PsdConfig.progress_history_rows).
    uint32_t max_history_rows = 1000;
  };

  // Opens read-write (creating the file when there is none) and migrates to
  // kSchemaVersion. FAILED_PRECONDITION naming the file when it is locked
  // by another process, empty (0 bytes: never a store psd made), without
  // the SQLite header, unreadable, not writable, corrupt or of a newer
  // schema; the file is left untouched then.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(Options options);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // Everything stored. FAILED_PRECONDITION naming the file and the job when
  // a row does not decode (ranks not 0..n-1, a blob that does not parse).
  absl::StatusOr<StoredState> Load();

  // Writes `changes` in one synced transaction. UNAVAILABLE naming the file
  // when it fails (nothing of it stays), INTERNAL for a changed job that is
  // not stored (a caller bug).
  absl::Status Commit(const StoreChanges& changes);
  // The replica view last committed (epoch 0, none failed, in a store that
  // never had one).
  absl::StatusOr<StoredReplicaView> LoadReplicaView();

  // The job's progress history, oldest step first.
  absl::StatusOr<std::vector<Progress>> History(const std::string& job_id);

  const std::string& path() const { return options_.path; }

  // Moves the database at `path` (and its -wal and -shm files) aside to
  // "PATH.bad-YYYYmmdd-HHMMSS" (UTC `now`), so the next Open starts empty;
  // returns the new name. FAILED_PRECONDITION when another process holds
  // the store; NOT_FOUND when there is no file.
  static absl::StatusOr<std::string> MoveAside(const std::string& path,
                                               absl::Time now);

 private:
  JobStore(Options options, sqlite3* db, int lock_fd);
  absl::Status Migrate();
  absl::Status WriteChanges(const StoreChanges& changes);
  absl::Status ThinHistory(const std::string& job_id);

  const Options options_;
  sqlite3* db_;  // owned
  int lock_fd_;  // owned; holds the flock
};

}  // namespace ps

#endif  // SERVER_COORDINATOR_JOB_STORE_H_
