// JobTable: every job the coordinator was given and the state machine that
// moves it (see coordinator.h for the diagram): submit order, the queue of
// pending jobs, ranks and their workers, the quorum (active ranks), and the
// job's progress.
//
//   JobTable jobs;
//   JobTable::Job& job = jobs.Add(spec, placement, now);    // "job-000001"
//   while (JobTable::Job* next = jobs.PopStartable(idle)) { ... }
//   if (std::optional<JobEnd> end = jobs.LoseRank(job, rank, why)) {
//     ... free the workers, drop the job on the shards ...
//     jobs.End(job, end->state, end->reason, now);
//   }
//
// The table decides; the caller does what follows (telling workers, calling
// shards): methods that may end a job return the JobEnd to apply with End.
#ifndef SERVER_COORDINATOR_JOB_TABLE_H_
#define SERVER_COORDINATOR_JOB_TABLE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"

namespace ps {

// Seconds since the Unix epoch: how JobStatus (and ScaleStatus,
// ReshardStatus) record times.
double UnixSeconds(absl::Time t);

// How a job ends: its final state and the reason recorded with it.
struct JobEnd {
  JobState state;
  std::string reason;
};

// Not thread-safe: the owner serializes every call (JobCoordinator holds its
// mutex). Job pointers stay valid for the table's life (jobs are never
// erased).
class JobTable {
 public:
  struct Job {
    JobStatus status;
    // Holds its workers and waits for the shards' RegisterJob (still
    // PENDING).
    bool registering = false;
    // By rank: the worker id ("" once lost), the worker name (kept for
    // rejoin and messages), whether it reported finished.
    std::vector<std::string> rank_worker;
    std::vector<std::string> rank_name;
    std::vector<bool> rank_finished;
    // Ranks counting toward the quorum; SHRINK removes lost ones.
    std::set<uint32_t> active;
    // The leader's latest samples_per_s: the job's rate if all num_workers
    // ran at its pace (see worker/trainer/trainer.h).
    float leader_samples_per_s = 0;
    // SUCCEEDED and dropped from the shards (succeeded_jobs_kept); not
    // stored, so a restarted coordinator drops the old ones once more.
    bool dropped = false;

    const std::string& id() const { return status.job_id(); }
    bool Ended() const;
    // Rank 0, or the lowest rank left after SHRINK.
    uint32_t Leader() const;
  };

  // Stores a PENDING job with the next id ("job-000001", ...), queued behind
  // the pending ones.
  Job& Add(JobSpec spec, Placement placement, absl::Time now);
  // Undoes the Add of `job_id` when it is still the newest job and pending
  // without workers (its submission could not be stored); false otherwise.
  bool Unadd(const std::string& job_id);
  // Puts back a stored job (JobStore, in submit order): a PENDING one that
  // holds no workers rejoins the queue. Ids stay as stored.
  void Restore(std::unique_ptr<Job> job);
  // The number of the next id; Restore's caller sets it from the store.
  uint64_t next_job() const { return next_job_; }
  void set_next_job(uint64_t next) { next_job_ = next; }
  // Every job, oldest first.
  const std::vector<std::unique_ptr<Job>>& all() const { return jobs_; }
  // Null for an unknown id.
  Job* Find(const std::string& job_id);
  // NOT_FOUND naming job_id for an unknown id.
  absl::StatusOr<Job*> Get(const std::string& job_id);
  // Every job, oldest first.
  void List(ListJobsResponse* response) const;

  // How many idle workers joined a job (RegisterWorkerRequest.job_id).
  using JoinedCount = std::function<size_t(const Job&)>;
  // A pending job that its idle workers are enough for, taken off the queue;
  // else null. Jobs of built-in models start strictly in submit order: the
  // oldest of them starts once `idle` (workers that joined no job) reach
  // its num_workers, and the others wait behind it. A custom model's job
  // starts once `joined(job)` reach its num_workers, and neither waits
  // for nor holds up any other job.
  Job* PopStartable(size_t idle, const JoinedCount& joined);
  // Gives a job from PopStartable its workers (by rank) and marks it
  // registering on `num_shards` shards.
  static void BeginRegistering(Job& job,
                               const std::vector<std::string>& worker_ids,
                               const std::vector<std::string>& worker_names,
                               uint32_t num_shards);
  // Says in each pending job's reason why it waits: `idle_left` idle
  // workers that joined no job, `joined(job)` that joined it.
  void ExplainPending(size_t idle_left, const JoinedCount& joined);
  // The newest job named `name` that has not ended; null when none.
  Job* FindLive(const std::string& name);
  // The SUCCEEDED jobs, the latest to end first (ties: the later id).
  std::vector<Job*> SucceededNewestFirst();
  // The job `name_or_id` names: that id, else the newest SUCCEEDED job of
  // that name, else the newest of that name; null when none.
  Job* FindByIdOrName(const std::string& name_or_id);
  // Registration finished (either way); true when the job still waits to
  // run (was not ended meanwhile).
  static bool StopRegistering(Job& job);
  // The shards hold it: RUNNING from `now`.
  static void MarkRunning(Job& job, absl::Time now);

  // Records the end state, reason and time. True when the job had left the
  // pending queue, i.e. may hold workers and (registering or running) may
  // have reached the shards.
  bool End(Job& job, const JobEnd& end, absl::Time now);

  // The worker of `rank` was lost (`event` says which and why). A rank
  // that had finished is no loss. Otherwise, under FAIL the job ends; under
  // SHRINK the rank leaves the quorum and the job goes on, unless no rank is
  // left or every rank left had finished (SUCCEEDED).
  static std::optional<JobEnd> LoseRank(Job& job, uint32_t rank,
                                        const std::string& event);
  // A running SHRINK job with a lost, unfinished rank once held by a worker
  // named `name`: that job and rank. nullopt when none.
  std::optional<std::pair<Job*, uint32_t>> FindRejoin(const std::string& name);
  // Gives the rank back to `worker_id` (the quorum grows again); its label
  // and start step go into the job's reason.
  static void Rejoin(Job& job, uint32_t rank, const std::string& worker_id,
                     uint64_t start_step);

  // A report's standing against a job: an error for a rank out of range
  // or a rate or time that is negative or not finite (naming the field),
  // a reason to tell the worker to abort (the job is not running, or the
  // worker no longer holds the rank), or "" when it is to be applied.
  static absl::StatusOr<std::string> CheckReport(const Job& job,
                                                 const ProgressReport& report);
  static absl::Status CheckProgress(const Progress& progress);
  // Applies a checked report: the leader's progress becomes the job's; an
  // error fails the job; the job SUCCEEDS once every active rank reported
  // `finished` (under ASP/SSP the others may finish after the leader: their
  // last pushes count).
  static std::optional<JobEnd> ApplyReport(Job& job,
                                           const ProgressReport& report);

 private:
  // The job's samples/s counts only live workers: the leader's pace times
  // the ranks still active.
  static void UpdateSamplesPerS(Job& job);
  // SUCCEEDED (with the leader's last progress) once every active rank has
  // finished; else nullopt, with a reason naming the ranks still running
  // when the leader is done.
  static std::optional<JobEnd> FinishedIfAllDone(Job& job);

  // Submit order; never erased, so Job pointers stay valid.
  std::vector<std::unique_ptr<Job>> jobs_;
  absl::flat_hash_map<std::string, Job*> jobs_by_id_;
  // PENDING jobs not yet holding workers, oldest first.
  std::deque<Job*> pending_;
  uint64_t next_job_ = 1;
};

// The rank slots the shards hold for a job: max(num_workers, max_workers)
// (job_scaling.h).
uint32_t RankSlots(const JobSpec& spec);

// "worker w-3 (rank 1, host-b)": how messages name a worker of a job.
std::string WorkerLabel(const std::string& id, uint32_t rank,
                        const std::string& name);

}  // namespace ps

#endif  // SERVER_COORDINATOR_JOB_TABLE_H_
