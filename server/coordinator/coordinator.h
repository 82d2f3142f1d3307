// JobCoordinator: the job and worker state machine behind the JobCoordinator
// service. Transport-free: the gRPC adapter in server/rpc forwards each RPC
// to the method of the same name, and implements ShardControl
// (shard_op_queue.h) over the ParameterServer service.
//
// A composition of three parts under one mutex (the shard queue has its
// own): JobTable (jobs, their states and ranks), WorkerRegistry (workers,
// liveness, parked long-polls) and ShardOpQueue (calls to the shards, in
// decision order, outside the lock).
//
// Its methods live by RPC family: coordinator.cc (Create, the reload from
// the store, Tick, Shutdown), coordinator_jobs.cc (jobs, progress reports
// and the state machine that starts and ends them), coordinator_workers.cc
// (registration, heartbeats, the assignment long-poll, lost workers) and
// coordinator_traces.cc (step timelines).
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
//
// Custom models (ModelSpec.custom, a user's own model): only workers that
// registered for that job (RegisterWorkerRequest.job_id, the Python
// client's workers) take its ranks, in registration order, and they take
// no other job; workerd's workers (no job_id) never take one. Such a job
// starts once num_workers have joined, independent of the submit-order
// queue of the other jobs. Its workers submit it with join_existing, so
// the first creates it and the others find it by name.

// Restart (Options::store set): every state change is committed to the
// store before the call that made it returns (SubmitJob, CancelJob and
// ReportProgress answer UNAVAILABLE naming the file when the commit fails,
// and a submit is then undone; the other calls log it, and the change is
// written with the next one). A coordinator created over a store reloads
// its jobs and workers: ended jobs stay visible, pending ones queue again,
// jobs that were registering on the shards register again (the shards
// accept a repeated registration of the same spec), and running jobs carry
// on. Reloaded workers keep their ids and ranks and count as seen at the
// restart, so they have worker_timeout_ms to call again (their heartbeats
// resume with the ids they had); one that does not is lost as usual. Job
// and worker ids continue from the highest stored.

#ifndef SERVER_COORDINATOR_COORDINATOR_H_
#define SERVER_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/defaults.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"
#include "proto/ps.pb.h"
#include "server/coordinator/job_store.h"
#include "server/coordinator/job_table.h"
#include "server/coordinator/job_validation.h"
#include "server/coordinator/progress_history.h"
#include "server/coordinator/replica_monitor.h"
#include "server/coordinator/resharder.h"
#include "server/coordinator/shard_op_queue.h"
#include "server/coordinator/store_sync.h"
#include "server/coordinator/trace_store.h"
#include "server/coordinator/worker_registry.h"

namespace ps {

// Thread-safe: every method may be called from any thread. Methods return
// without waiting for other callers, except that the thread that finds
// shard work queued runs it (see ShardOpQueue) before returning, so
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
    // Set: the shards' addresses now (num_shards entries; the psd's
    // ShardDirectory, which follows shards that move), asked for each
    // Assignment instead of shard_addresses. Called under the coordinator's
    // lock: it must not call back into the coordinator.
    std::function<std::vector<std::string>()> current_shard_addresses;
    // Replicated jobs (JobSpec.replication > 1): how a heartbeat carrying
    // the replica view reaches a shard, blocking up to the deadline (psd:
    // gRPC SetReplicaView). Set: the coordinator runs a ReplicaMonitor
    // (replica_monitor.h) from the first replicated job on, failing a
    // silent shard over to its backups. Unset: no failover.
    std::function<absl::Status(uint32_t shard, const SetReplicaViewRequest&,
                               absl::Time deadline, SetReplicaViewResponse*)>
        set_replica_view;
    // Live re-placement (`psctl scale --shards`, resharder.h): one shard's
    // Reshard, blocking up to the deadline (psd: gRPC, or the coordinator's
    // own shard directly). Unset: ScaleJob refuses `shards`.
    std::function<absl::Status(uint32_t shard, const ReshardRequest&,
                               absl::Time deadline, ReshardResponse*)>
        reshard;
    absl::Duration shard_heartbeat =
        absl::Milliseconds(kDefaultShardHeartbeatMs);
    uint32_t shard_heartbeat_misses = kDefaultShardHeartbeatMisses;
    // The shard in this coordinator's process (psd: its shard_id), or
    // UINT32_MAX. A coordinator that starts with replicated jobs running
    // (it restarted) fails that shard over at once: it restarted with the
    // coordinator and holds none of their chunks any more; it rejoins.
    uint32_t own_shard = UINT32_MAX;
    // Time source for timestamps, heartbeats and long-poll deadlines.
    // Unset: absl::Now. Tests inject a fake so they never sleep.
    std::function<absl::Time()> clock;
    // Datasets and data_dir check for SubmitJob. num_shards and
    // num_registered_workers are filled in by the coordinator.
    ValidationContext validation;
    // The durable job store (job_store.h); borrowed, must outlive the
    // coordinator. Null: jobs live in memory only. Set: Create reloads the
    // jobs and workers stored there (see "Restart" above), and each call
    // commits the state it changed before it returns.
    JobStore* store = nullptr;
    // Points of each job's curve kept in memory (GetHistory); the store's
    // PsdConfig.progress_history_rows.
    uint32_t max_history_points = 1000;
    // SUCCEEDED jobs left on the shards, newest first; the oldest beyond
    // are dropped (PsdConfig.succeeded_jobs_kept).
    uint32_t succeeded_jobs_kept = kDefaultSucceededJobsKept;
  };

  // Checks `options` (INVALID_ARGUMENT naming the field). `shards` is
  // borrowed and must outlive the coordinator. With options.store, reloads
  // it first (its error, naming the file, when it cannot be read) and
  // registers again the jobs that were registering (blocks on the shards).
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
  // are idle. join_existing: a job of the same name that has not ended is
  // answered instead (joined = true) when its normalized spec is equal,
  // else FAILED_PRECONDITION naming the first field that differs.
  absl::Status SubmitJob(const SubmitJobRequest& request,
                         SubmitJobResponse* response);

  // Grows or shrinks a running job to request.workers (ScaleJobRequest has
  // the rules; job_scaling.h). Growing takes idle workers at once, and
  // later ones as they register; shrinking asks the highest ranks to leave
  // through their heartbeats. request.shards (or drain) instead re-places
  // the job's chunks over those shards on a thread of its own (resharder.h;
  // coordinator_reshard.cc), answering once it is recorded. A refused call
  // changes nothing.
  absl::Status ScaleJob(const ScaleJobRequest& request,
                        ScaleJobResponse* response);

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
  // name is empty; UNAVAILABLE after Shutdown. With job_id, the worker
  // joins that job alone: NOT_FOUND for an unknown job, FAILED_PRECONDITION
  // when it is no custom model, has ended, or already has its workers (a
  // lost rank of the same name, under SHRINK, may rejoin).
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

  // A worker leaves at once (UnregisterRequest): removed like a lost one,
  // without waiting for worker_timeout_ms; its rank leaves the job's quorum
  // (SHRINK goes on, FAIL fails naming it). An unknown worker: OK with
  // known = false, nothing changed. May block on the shards (membership).
  absl::Status Unregister(const UnregisterRequest& request,
                          UnregisterResponse* response);

  // An elastic data job's worker asks which examples a step reads
  // (server/coordinator/data_plan.h): answered from the stored plan, or
  // sealed when it is the next step and the worker reads in the last
  // segment; a new segment's ranks become the quorum on the shards before
  // the answer. UNAVAILABLE when the step is not planned yet and this
  // worker may not seal it (a joiner: ask again); FAILED_PRECONDITION for a
  // worker without a running elastic job. May block on the shards.
  absl::Status GetDataPlan(const GetDataPlanRequest& request,
                           GetDataPlanResponse* response);

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

  // The job's training curve: the leader's reports, oldest step first
  // (progress_history.h), reloaded from the store after a restart. NOT_FOUND
  // for an unknown job. Copies under the lock; never waits on the shards.
  absl::Status GetHistory(const GetHistoryRequest& request,
                          GetHistoryResponse* response);

  // Step timelines (trace_store.h). StartTrace stores the window on a
  // pending or running job (NOT_FOUND unknown, FAILED_PRECONDITION ended,
  // INVALID_ARGUMENT empty or too long); its workers get it in their
  // Heartbeat answers. UploadTrace keeps a worker's spans (the sender must
  // hold the rank). GetTrace: NOT_FOUND for an unknown job. None of them
  // waits on the shards. Traces live in memory only.
  absl::Status StartTrace(const StartTraceRequest& request,
                          StartTraceResponse* response);
  absl::Status UploadTrace(const UploadTraceRequest& request);
  absl::Status GetTrace(const GetTraceRequest& request,
                        GetTraceResponse* response);

  // Housekeeping at time `now`: expires long-polls whose wait passed and
  // declares lost the workers silent for worker_timeout_ms, applying their
  // job's on_worker_failure policy. Call periodically (e.g. every 100 ms).
  void Tick(absl::Time now);

  // Completes every parked long-poll with UNAVAILABLE; later SubmitJob,
  // RegisterWorker and GetAssignment calls get UNAVAILABLE. Idempotent.
  void Shutdown();

  // Replicated jobs: where a job's clients reach each shard's chunks now
  // (assignments, GetShardAddresses with a job id). A shard not in service
  // that is the primary of chunks of `placement` takes the address of their
  // acting primary, the shard holding their backups in this job
  // (ReplicaMonitor::Redirect); unchanged without failovers.
  void RedirectFailedShards(const Placement& placement,
                            std::vector<std::string>* addresses) const;
  // The same for the job `job_id`; NOT_FOUND naming it when there is no
  // such job (nothing changed).
  absl::Status RedirectFailedShards(const std::string& job_id,
                                    std::vector<std::string>* addresses)
      ABSL_LOCKS_EXCLUDED(mu_);
  // For calls made to every shard (no job): each failed shard takes the
  // address of the next shard not failed on the cluster's ring, a live
  // process; no job's chunks are served there.
  void RedirectFailedShards(std::vector<std::string>* addresses) const;
  // The replica view's epoch (0 before any failover).
  uint64_t replica_epoch() const;

 private:
  using Job = JobTable::Job;
  using Worker = WorkerRegistry::Worker;

  JobCoordinator(Options options, ShardControl* shards);
  // UNAVAILABLE: what calls get after Shutdown.
  static absl::Status ShuttingDown();
  // Create's reload from options_.store.
  absl::Status Restore() ABSL_LOCKS_EXCLUDED(mu_);
  // Create's ReplicaMonitor (with options_.set_replica_view), from the
  // stored view; armed when a reloaded job is replicated, after failing
  // over the shard in this process (Options::own_shard), which restarted
  // with the coordinator.
  absl::Status StartReplicaMonitor() ABSL_LOCKS_EXCLUDED(mu_);
  // The monitor's commit: the view into the store before anyone hears it.
  absl::Status CommitReplicaView(uint64_t epoch, const ReplicaSets& sets)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The monitor's rejoin: the running replicated jobs dropped and
  // registered afresh on `shard` (a failed shard that answers again).
  absl::Status RejoinShard(uint32_t shard) ABSL_LOCKS_EXCLUDED(mu_);
  // ScaleJob's `shards` or `drain` (coordinator_reshard.cc): checks,
  // records and starts the re-placement thread.
  absl::Status StartReshard(Job& job, const ScaleJobRequest& request,
                            ScaleJobResponse* response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The re-placement thread's body.
  void RunReshard(const std::string& job_id, const Placement& from,
                  const Placement& to, const ReshardStatus& status)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Stores how a re-placement ended; a "failed" one (committed in the store,
  // not on every shard) fails the job.
  void RecordReshardEnd(const std::string& job_id, const ReshardStatus& end)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A Resharder whose hooks update and commit job `job_id`.
  Resharder MakeResharder(const std::string& job_id);
  // Restore: a re-placement the coordinator was in the middle of is
  // finished (its placement was committed) or aborted on the shards.
  void FinishStoredReshards() ABSL_LOCKS_EXCLUDED(mu_);
  // Arms the monitor when `spec` is replicated.
  void MaybeArmReplicas(const JobSpec& spec);
  // Commits the changes to the store; logs a failure.
  absl::Status Persist() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The worker called at `now`; logs the first call of a reloaded worker.
  void NoteContact(Worker& worker, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Lock-held steps. Each may queue shard work (run by the caller's
  // shard_ops_.Drain() after unlocking) and completes polls into `done`.

  // Gives idle workers (of no job, registration order) to the free rank
  // slots of the running jobs that a scale grows (coordinator_scale.cc).
  void MaybeGrow(absl::Time now, CompletedPolls& done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts pending jobs, oldest first, while enough workers are idle.
  void MaybeStartJobs() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a worker named `name` may join job `job_id` (RegisterWorker).
  absl::Status CheckJoin(const std::string& job_id, const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies `end`, frees the workers (telling them to abort unless it
  // succeeded) and, for a failed or cancelled job that may have reached the
  // shards, queues their DropJob.
  void EndJob(Job& job, const JobEnd& end, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues the DropJob of the SUCCEEDED jobs beyond the newest
  // options_.succeeded_jobs_kept (once per coordinator life each).
  void DropOldSucceeded() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the worker; applies its job's failure policy. `why` completes
  // "worker w-3 (rank 1, name) lost: " ("... left: " when `left`).
  void LoseWorker(const std::string& worker_id, const std::string& why,
                  absl::Time now, CompletedPolls& done, bool left = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives a lost rank of a running SHRINK job back to a worker of the same
  // name.
  void MaybeRejoin(Worker& worker, CompletedPolls& done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool FillAssignment(const Worker& worker, GetAssignmentResponse* response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completes the worker's parked long-poll if it now has an assignment.
  void DeliverAssignment(Worker& worker, CompletedPolls& done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers a GetAssignment at once or parks it.
  void AnswerOrPark(Worker& worker, const GetAssignmentRequest& request,
                    GetAssignmentResponse* response,
                    std::function<void(absl::Status)> callback,
                    CompletedPolls& done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Shard work, queued under mu_ and run by the draining thread.
  void EnqueueRegister(const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnqueueMembership(const Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A sealed segment of an elastic data job: its ranks become the quorum
  // (under ASP/SSP added to it); whether it changed (membership queued).
  bool FollowSegment(Job& job, const DataSegment& segment)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The request RegisterJob sends; nullopt once the job stopped starting.
  std::optional<RegisterJobRequest> RegisterRequest(const std::string& job_id)
      ABSL_LOCKS_EXCLUDED(mu_);
  // After RegisterJob on the shards: RUNNING, or FAILED and dropped.
  void FinishRegistering(const std::string& job_id, const absl::Status& failure,
                         uint32_t asked) ABSL_LOCKS_EXCLUDED(mu_);
  // Delivers assignments and sends a membership smaller than the job.
  void StartRunning(Job& job, absl::Time now, CompletedPolls& done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A membership change a shard refused: the job fails (a shard that keeps
  // waiting for a lost rank would stall every step).
  void MembershipFailed(const std::string& job_id, const absl::Status& failure)
      ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  const uint32_t num_shards_;
  // ShardControl work in decision order; its own lock, taken after mu_.
  ShardOpQueue shard_ops_;

  absl::Mutex mu_;
  JobTable jobs_ ABSL_GUARDED_BY(mu_);
  WorkerRegistry workers_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  StoreSync sync_ ABSL_GUARDED_BY(mu_);
  ProgressHistory history_ ABSL_GUARDED_BY(mu_);
  TraceStore traces_ ABSL_GUARDED_BY(mu_);
  // When Restore reloaded the store (for the reattach log).
  absl::Time restored_at_ ABSL_GUARDED_BY(mu_);
  // Set by Create when options_.set_replica_view is; its own lock, a leaf
  // under mu_ (its commit takes mu_ with no monitor lock held).
  std::unique_ptr<ReplicaMonitor> replicas_;
  // Re-placement threads (one per ScaleJob with `shards`), joined by
  // Shutdown.
  std::vector<std::thread> reshards_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // SERVER_COORDINATOR_COORDINATOR_H_
