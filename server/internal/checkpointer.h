// Checkpoint scheduling for a shard (server/shard.h says when checkpoints
// are taken and what a restore guarantees): deciding when one is due,
// the background writer, writing one (snapshot under the chunks' own locks,
// then file I/O under no shard lock), releasing the answers a durable
// checkpoint unblocks, and re-creating a job's state from a checkpoint.
// Internal to the shard; the file format is server/checkpoint.h.
//
//   Checkpointer ckpt(shard_id);
//   PS_ASSIGN_OR_RETURN(std::vector<std::string> ids, ckpt.Open(dir));
//   ...restore each...
//   ckpt.Start();
//   ckpt.MaybeQueue(job, advanced, absl::InfinitePast());  // after a push
//   ckpt.Shutdown(jobs);                                   // a last one each
//
// Thread safety: after Open and Start (called once, before serving), every
// method may be called concurrently. MaybeQueue never blocks on I/O; Write,
// Flush and Shutdown do.
#ifndef SERVER_INTERNAL_CHECKPOINTER_H_
#define SERVER_INTERNAL_CHECKPOINTER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/checkpoint.h"
#include "server/internal/job.h"

namespace ps {
namespace internal {

class Checkpointer {
 public:
  explicit Checkpointer(uint32_t shard_id) : shard_id_(shard_id) {}
  // Stops the writer (without the last checkpoints Shutdown writes).
  ~Checkpointer();

  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Opens the store in `dir` (creating it) and lists the jobs it holds
  // checkpoints of. INVALID_ARGUMENT naming checkpoint_dir when it cannot
  // be created or read. Call once, before anything else.
  absl::StatusOr<std::vector<std::string>> Open(const std::string& dir);
  // Open succeeded: jobs asking for checkpoints get them.
  bool enabled() const { return store_ != nullptr; }
  // The newest intact checkpoint of `job_id` that `accept` takes
  // (CheckpointStore::LoadLatest).
  absl::StatusOr<CheckpointStore::Loaded> Load(
      const std::string& job_id,
      const CheckpointStore::Accept& accept = nullptr) const;

  // Starts the background writer (after Open and the restores).
  void Start();

  // Queues a checkpoint of `job` for the writer if one is due; `advanced`
  // are the chunks whose version just moved. `now` = InfinitePast(): read
  // the clock if needed. Without `recheck`, a call with nothing advanced
  // decides "not due" from lock-free hints when it can.
  void MaybeQueue(const std::shared_ptr<Job>& job,
                  absl::Span<Chunk* const> advanced, absl::Time now,
                  bool recheck = false) ABSL_LOCKS_EXCLUDED(writer_mu_);

  // After a SparseExchange of `job` answered at tables version `version`:
  // queues a checkpoint if one is due (BSP: the tables' version counts
  // steps). Never blocks on I/O.
  void AfterExchange(const std::shared_ptr<Job>& job, uint64_t version)
      ABSL_LOCKS_EXCLUDED(writer_mu_);
  // A sparse push of `job` was handled (every_seconds and Shutdown write
  // only when something was pushed since the last checkpoint).
  void CountSparsePush(Job& job) {
    job.schedule.table_pushes.fetch_add(1, std::memory_order_relaxed);
  }

  // Snapshots and writes one checkpoint of `job` (which must be
  // checkpointing) on this thread, then releases the answers it makes
  // durable. Returns once it is durable, or the write's error. With
  // tables: the tables file, then the .ckpt naming it.
  absl::Status Write(const std::shared_ptr<Job>& job);

  // Re-creates `job` (built by NewJob from ck.registration, `local_count`
  // chunks here, nothing restored yet) from checkpoint `ck`: its tables
  // from the companion file (when the job has tables; restored first, and
  // the file's size and CRC checked), then RestoreJobState, then the
  // tables get the checkpoint's membership. An error (INVALID_ARGUMENT,
  // DATA_LOSS naming the file) leaves `job` unusable: discard it.
  absl::Status Restore(JobCheckpoint ck, int local_count, Job& job) const;

  // Blocks until the writer has written every checkpoint queued so far.
  void Flush() ABSL_LOCKS_EXCLUDED(writer_mu_);

  // Stops the writer after what it has queued, then writes a last
  // checkpoint of each of `jobs` that changed since its previous one.
  // Blocks on that I/O. Idempotent.
  void Shutdown(const std::vector<std::shared_ptr<Job>>& jobs);

  // Marks the dropped `job` so nothing more is written, and deletes its
  // files, its prepared state's too (a failure is logged).
  void Remove(Job& job);

  // A live re-placement's prepared job (Shard PREPARE of a checkpointing
  // job, server/internal/reshard.h), kept in <dir>/prepared/ apart from the
  // job's checkpoints: a restart restores the old placement from those as
  // it was and, beside it, what the shard prepared, for a COMMIT the
  // coordinator may send it after its store committed the move. One per
  // job: a write replaces the job's earlier one. `job` must never have
  // written a checkpoint (a fresh PREPARE's job: its tables are written in
  // full). Blocks on the I/O; the job's answers and schedule are left as
  // they are. FAILED_PRECONDITION without a store.
  absl::Status WritePrepared(Job& job);
  // The job's prepared state that `accept` takes (LoadLatest); NOT_FOUND
  // when there is none.
  absl::StatusOr<CheckpointStore::Loaded> LoadPrepared(
      const std::string& job_id, const CheckpointStore::Accept& accept) const;
  // Restore() from a prepared state (its tables file is beside it).
  absl::Status RestorePrepared(JobCheckpoint ck, int local_count,
                               Job& job) const;
  // Deletes the job's prepared state, if any (a failure is logged).
  void RemovePrepared(const std::string& job_id) const;

 private:
  void WriterLoop();
  void StopWriter() ABSL_LOCKS_EXCLUDED(writer_mu_);
  // Restore() reading the tables from `store`.
  absl::Status RestoreFrom(const CheckpointStore& store, JobCheckpoint ck,
                           int local_count, Job& job) const;

  const uint32_t shard_id_;
  // Set by Open before serving, then immutable; null = no checkpoints.
  std::unique_ptr<CheckpointStore> store_;
  // <dir>/prepared: re-placements' prepared jobs (WritePrepared), opened
  // by Open when it exists, else by the first WritePrepared; never reset.
  std::string prepared_dir_;
  mutable absl::Mutex prepared_mu_;
  std::unique_ptr<CheckpointStore> prepared_ ABSL_GUARDED_BY(prepared_mu_);
  // The prepared store, or null when there is none (yet).
  const CheckpointStore* PreparedStore() const
      ABSL_LOCKS_EXCLUDED(prepared_mu_);

  // The background writer and its queue of jobs due for a checkpoint.
  absl::Mutex writer_mu_;
  std::deque<std::shared_ptr<Job>> writer_queue_ ABSL_GUARDED_BY(writer_mu_);
  bool writer_stop_ ABSL_GUARDED_BY(writer_mu_) = false;
  bool writer_busy_ ABSL_GUARDED_BY(writer_mu_) = false;
  std::thread writer_;
  absl::Mutex shutdown_mu_;  // one Shutdown joins the writer
};

// Sets when the next checkpoint of `job` is due after one of step `step`,
// taken when its pushes counted `pushes_then` (sparse ones
// `table_pushes_then`).
void ScheduleNext(Job& job, uint64_t step, uint64_t pushes_then, absl::Time now,
                  uint64_t table_pushes_then = 0)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.schedule.mu);

// Re-creates the state of `job` (built by NewJob from ck.registration,
// `local_count` chunks here, no chunks yet) from checkpoint `ck` of shard
// `shard_id`: chunks, membership, SSP clocks, durable version.
// INVALID_ARGUMENT when the checkpoint does not fit the registration.
absl::Status RestoreJobState(JobCheckpoint ck, uint32_t shard_id,
                             int local_count, Job& job);

}  // namespace internal
}  // namespace ps

#endif  // SERVER_INTERNAL_CHECKPOINTER_H_
