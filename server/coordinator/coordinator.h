// JobCoordinator: the job and worker state machine behind the JobCoordinator
// service. Transport-free: the gRPC adapter in server/rpc forwards each RPC
// to the method of the same name, and implements ShardControl over the
// ParameterServer service.
//
//   FakeOrGrpcShardControl shards;  // outlives the coordinator
//   JobCoordinator::Options options;
//   options.shard_addresses = {"10.0.0.1:7000", "10.0.0.2:7000"};
//   auto coord = JobCoordinator::Create(options, &shards);
//   if (!coord.ok()) return coord.status();
//   SubmitJobResponse submitted;
//   absl::Status s = (*coord)->SubmitJob(request, &submitted);
//   // A timer thread, every few hundred ms:
//   (*coord)->Tick(absl::Now());
//
// Life cycle of a job:
//
//   SubmitJob --> PENDING --(num_workers idle workers)--> registering on
//                   |          every shard (still PENDING)
//                   |                 | ok                    | a shard fails
//                   |                 v                       v
//                   |              RUNNING ---------------> FAILED
//                   |               |   |   worker error, lost worker (FAIL),
//                   |               |   |   every worker lost (SHRINK)
//                   |  CancelJob    |   | leader (rank 0, or the lowest rank
//                   +------+--------+   | left) reports finished
//                          v            v
//                      CANCELLED    SUCCEEDED
//
// Every end state carries a reason and an end time. Shards drop a job's
// parameters on cancel and on failure (which also releases the surviving
// workers' waits); after success they keep them so that Stats still
// describes the job and its parameters can be read back.
//
// Workers: RegisterWorker makes a worker idle; a pending job takes the
// first num_workers idle workers in registration order as ranks 0..N-1 (jobs
// start strictly in submit order, so a large job is not starved). A worker
// that stops calling (Heartbeat, GetAssignment, ReportProgress) for
// worker_timeout_ms is lost at the next Tick; registering a name again
// replaces (and loses) the earlier worker of that name. Under SHRINK, a lost
// worker that registers again under the same name while its job runs takes
// back its rank, starting at the job's current step ("rejoin").

#ifndef SERVER_COORDINATOR_COORDINATOR_H_
#define SERVER_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"
#include "proto/ps.pb.h"
#include "server/coordinator/job_validation.h"

namespace ps {

// What the coordinator needs from the shards. Implementations may block
// (they are RPCs); the coordinator never calls them while holding its lock,
// and makes at most one call at a time, in the order it decided them.
class ShardControl {
 public:
  virtual ~ShardControl() = default;
  // Creates the job's chunks that `shard` holds. An error fails the job.
  virtual absl::Status RegisterJob(uint32_t shard,
                                   const RegisterJobRequest& request) = 0;
  // Frees the job's chunks. Errors are logged and otherwise ignored.
  virtual absl::Status DropJob(uint32_t shard, const std::string& job_id) = 0;
  // Sets which worker ranks count toward the quorum. An error fails the job.
  virtual absl::Status SetMembership(uint32_t shard,
                                     const SetMembershipRequest& request) = 0;
};

// Thread-safe: every method may be called from any thread. Methods return
// without waiting for other callers, except that the thread that finds
// ShardControl work queued runs it (see ShardControl) before returning, so
// SubmitJob, CancelJob, RegisterWorker, ReportProgress and Tick may block
// for as long as the shard calls take. Callbacks (GetAssignment's `done`)
// run outside the lock and may call back into the coordinator.
class JobCoordinator {
 public:
  struct Options {
    // Returned to workers by RegisterWorker.
    uint32_t heartbeat_interval_ms = 1000;
    // A worker silent this long is lost. Must exceed heartbeat_interval_ms.
    uint32_t worker_timeout_ms = 10000;
    // Shards in the cluster. 0: shard_addresses.size().
    uint32_t num_shards = 0;
    // "host:port" by shard id, copied into every Assignment. Empty or
    // num_shards entries.
    std::vector<std::string> shard_addresses;
    // Time source for timestamps, heartbeats and long-poll deadlines.
    // Unset: absl::Now. Tests inject a fake so they never sleep.
    std::function<absl::Time()> clock;
    // Datasets and data_dir check for SubmitJob. num_shards and
    // num_registered_workers are filled in by the coordinator.
    ValidationContext validation;
  };

  // Checks `options` (INVALID_ARGUMENT naming the field). `shards` is
  // borrowed and must outlive the coordinator.
  static absl::StatusOr<std::unique_ptr<JobCoordinator>> Create(
      Options options, ShardControl* shards);

  // Completes parked long-polls (Shutdown). Callers must have returned from
  // every other method first.
  ~JobCoordinator();

  JobCoordinator(const JobCoordinator&) = delete;
  JobCoordinator& operator=(const JobCoordinator&) = delete;

  // Validates, normalizes and places the spec; fills `response` with the
  // normalized spec and placement. Any validation problem: every one in
  // response->problems and INVALID_ARGUMENT summarizing them. dry_run: stops
  // there, storing nothing. Otherwise stores the job as PENDING with a new id
  // ("job-000001", ...) in response->job_id, and starts it if enough workers
  // are idle.
  absl::Status SubmitJob(const SubmitJobRequest& request,
                         SubmitJobResponse* response);

  // NOT_FOUND for an unknown job_id.
  absl::Status GetJob(const GetJobRequest& request, JobStatus* response);

  // Every job ever submitted, oldest first.
  absl::Status ListJobs(const ListJobsRequest& request,
                        ListJobsResponse* response);

  // Ends a pending or running job as CANCELLED ("cancelled by user"): its
  // workers learn through Heartbeat/ReportProgress (abort_job) and the
  // shards drop it. Cancelling a cancelled job is OK; a job that ended
  // otherwise gives FAILED_PRECONDITION; an unknown one NOT_FOUND.
  absl::Status CancelJob(const CancelJobRequest& request,
                         CancelJobResponse* response);

  // Adds an idle worker with a new id ("w-1", ...). INVALID_ARGUMENT when
  // name is empty; UNAVAILABLE after Shutdown.
  absl::Status RegisterWorker(const RegisterWorkerRequest& request,
                              RegisterWorkerResponse* response);

  // Records that the worker is alive. An unknown (or lost) worker gets
  // reregister = true; a worker whose job failed or was cancelled gets
  // abort_job until it next calls GetAssignment.
  absl::Status Heartbeat(const HeartbeatRequest& request,
                         HeartbeatResponse* response);

  // Long-poll for the worker's assignment; never blocks the calling thread.
  // Calls `done` (with OK and response->assignment set) at once if the
  // worker has one, else parks the call until an assignment exists or
  // wait_ms passes (OK, no assignment; noticed by Tick). A new call from the
  // same worker completes the parked one without an assignment. `response`
  // must stay valid until `done` runs. NOT_FOUND: unknown or lost worker
  // (register again); UNAVAILABLE: shutting down.
  void GetAssignment(const GetAssignmentRequest& request,
                     GetAssignmentResponse* response,
                     std::function<void(absl::Status)> done);

  // A worker's progress on its job. The leader's (rank 0, or the lowest
  // rank left after SHRINK) becomes the job's progress, with samples_per_s
  // counting only the live workers (the leader reports the rate of all
  // num_workers at its pace), and its `finished` ends the job as SUCCEEDED; any
  // rank's `error` ends it as FAILED. A report for a job that is not running,
  // or from a worker that no longer holds the rank, gets abort_job with the
  // reason. NOT_FOUND for an unknown job, INVALID_ARGUMENT for a rank out of
  // range.
  absl::Status ReportProgress(const ProgressReport& request,
                              ProgressReportResponse* response);

  // Housekeeping at time `now`: expires long-polls whose wait passed and
  // declares lost the workers silent for worker_timeout_ms, applying their
  // job's on_worker_failure policy. Call periodically (e.g. every 100 ms).
  void Tick(absl::Time now);

  // Completes every parked long-poll with UNAVAILABLE; later SubmitJob,
  // RegisterWorker and GetAssignment calls get UNAVAILABLE. Idempotent.
  void Shutdown();

 private:
  struct Worker;
  struct Job;
  using DoneList =
      std::vector<std::pair<std::function<void(absl::Status)>, absl::Status>>;

  JobCoordinator(Options options, ShardControl* shards);

  static void RunDone(DoneList& done);
  // Runs queued ShardControl work unless another thread already is.
  void DrainShardOps() ABSL_LOCKS_EXCLUDED(mu_);
  void EnqueueShardOp(std::function<void()> op)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnqueueDrop(const std::string& job_id, uint32_t num_shards)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnqueueMembership(const Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The shard work of starting a job: RegisterJob everywhere, then RUNNING.
  void RegisterOnShards(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);

  Job* FindJob(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Worker* FindWorker(const std::string& worker_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts pending jobs, oldest first, while enough workers are idle.
  void MaybeStartJobs() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets the end state, frees the workers (telling them to abort unless it
  // succeeded) and, on cancel of a job that reached the shards, queues their
  // DropJob.
  void EndJob(Job& job, JobState state, const std::string& reason,
              absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the worker; applies its job's failure policy. `why` completes
  // "worker w-3 (rank 1, name) lost: ".
  void LoseWorker(const std::string& worker_id, const std::string& why,
                  absl::Time now, DoneList& done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives a lost rank of a running SHRINK job back to a worker of the same
  // name.
  void MaybeRejoin(Worker& worker, DoneList& done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool FillAssignment(const Worker& worker, GetAssignmentResponse* response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completes the worker's parked long-poll if it now has an assignment.
  void DeliverAssignment(Worker& worker, DoneList& done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CompletePoll(Worker& worker, absl::Status status, DoneList& done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const uint32_t num_shards_;
  ShardControl* const shards_;  // borrowed

  absl::Mutex mu_;
  // Submit order; never erased, so Job pointers stay valid.
  std::vector<std::unique_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Job*> jobs_by_id_ ABSL_GUARDED_BY(mu_);
  // PENDING jobs not yet holding workers, oldest first.
  std::deque<Job*> pending_ ABSL_GUARDED_BY(mu_);
  // Live workers only; a lost worker is erased.
  absl::flat_hash_map<std::string, std::unique_ptr<Worker>> workers_
      ABSL_GUARDED_BY(mu_);
  uint64_t next_job_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_worker_ ABSL_GUARDED_BY(mu_) = 1;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  // ShardControl work in decision order, run outside mu_ by one thread at a
  // time so that, e.g., two membership changes reach the shards in order.
  std::deque<std::function<void()>> shard_ops_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ps

#endif  // SERVER_COORDINATOR_COORDINATOR_H_
