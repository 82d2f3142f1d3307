// Shard: one psd's parameter store and consistency logic, transport-free.
// It owns the chunks that a job's Placement puts on this shard, applies
// gradients with the job's optimizer under the job's consistency mode (BSP,
// ASP, SSP) and answers with parameters. server/rpc/ adapts it to gRPC.
//
//   Shard shard(ShardOptions{.shard_id = 0});
//   RegisterJobResponse reg;
//   PS_RETURN_IF_ERROR(shard.RegisterJob(register_request, &reg));
//   PushPullResponse resp;
//   absl::Notification n;
//   shard.PushPull(request, &resp, [&](absl::Status s) { ...; n.Notify(); });
//   n.WaitForNotification();  // the adapter replies from `done` instead
//
// Semantics, per job:
//   * A chunk's version counts the updates applied to it (0 at start). Its
//     initial values come from core/init.h with (spec.seed, tensor, element
//     position), so they do not depend on the shard count.
//   * BSP: the step-t push of worker w for chunk c is accepted when c is at
//     version t. When the quorum arrived (every active worker, or all but
//     consistency.backup_workers of them), the gradients are summed in
//     worker-rank order (bitwise reproducible whatever the arrival order),
//     divided by their count and applied; c goes to version t + 1. A second
//     push of (w, t) is a duplicate; a push for t < version is stale; both
//     are dropped and counted, and the call is still answered as usual. A
//     step > version is INVALID_ARGUMENT. PushPull answers once every pushed
//     chunk is at version >= t + 1.
//   * ASP: each push is applied on arrival, undivided; staleness (version now
//     - ChunkData.version) goes to a histogram. PushPull answers at once.
//     Pushes of a (worker, step) already applied to a chunk are duplicates.
//   * SSP(s): as ASP, but PushPull of step t answers once
//     (t + 1) - (slowest active worker's pushed steps) <= s, and Pull of step
//     t once t - slowest <= s.
//   * Wire formats (core/wire_format.h): each pushed chunk is decoded by
//     its own ChunkData.format (FP32, BF16, FP16) and, when it has indices
//     (top-k), scattered into zeros; BSP buffers and sums the dense FP32
//     result as above. Replies carry parameters in the job's
//     spec.wire.format, FP32 for a chunk whose values do not fit it.
//   * Delta pulls (jobs whose spec.wire.topk_fraction < 1): each chunk
//     records, after every update, which entries' bits changed
//     (internal/delta.h). A PushPull or Pull that names a chunk in `held`
//     at the version this shard last answered that worker gets only the
//     entries changed since (ChunkData.base_version), when that is smaller
//     than the full chunk; otherwise (another version, an optimizer that
//     changed most entries, a restarted shard) the full chunk. Applied
//     onto the worker's copy, a delta gives bitwise the full reply.
//   * Bad input (unknown job or chunk, chunk of another shard, wrong size,
//     unknown format, offsets out of range or not ascending,
//     NaN/Inf, worker out of range or not active, step from the future, ...)
//     fails the whole request, naming the field, before any of it is
//     applied, and is counted under a reason in the stats.
//
// Checkpoints and restarts (options.checkpoint_dir set and OpenCheckpoints()
// called before serving; per job JobSpec.checkpoint {every_steps,
// every_seconds}):
//   * Content (server/checkpoint.h): the registration, the membership, and
//     per local chunk its values, optimizer state, version and
//     duplicate-detection state (BSP: which workers pushed the pending step
//     and their buffered gradients; ASP/SSP: each worker's next unapplied
//     step). The newest two files per job are kept. A job with sparse
//     tables also saves them (JobTables::Save: rows, optimizer state,
//     admission counters, version, buffered BSP pushes, ASP/SSP pushed
//     steps) in a companion .tables file of the same sequence, written
//     before the .ckpt that names its size and CRC (server/checkpoint.h):
//     a crash leaves the previous pair or the new one.
//   * The tables' snapshot: under the tables' mutex, their consistency
//     state is copied and every table frozen copy on write (JobTables::
//     TakeSnapshot; no row is copied), so the saved tables are exactly
//     those of one version; sparse exchanges of the job wait for that
//     freeze only, not for the encoding and the file I/O, which read the
//     rows a batch at a time under each stripe's reader lock. Meanwhile
//     each row a push changes is copied once (not counted in the budget),
//     so the extra memory is the rows changed during the save. The chunks
//     are copied before it, each under its own lock; chunks and tables
//     each restore to their own saved version.
//   * When: at registration (version 0, durable before RegisterJob
//     returns); then, BSP, once every local chunk and the tables (whose
//     version counts BSP steps) are at version previous + every_steps,
//     where a BSP checkpoint's step is the lowest of the chunk versions
//     and the tables' version; ASP/SSP, once the slowest active worker has
//     pushed previous + every_steps dense steps (a job without dense
//     chunks here then checkpoints on every_seconds only); and
//     every_seconds after the previous one if anything (dense or sparse)
//     was pushed since; on Shutdown, a last one if anything changed. Each chunk
//     is copied under its own lock (pushes to the others go on); the file is
//     written by a background thread.
//   * Restart: OpenCheckpoints re-creates every job from its newest intact
//     checkpoint (a corrupt or truncated newer file is reported by name and
//     the previous one used). The restored chunks behave as before the
//     crash: a retried push of a step already applied is stale (answered
//     with the current parameters), a push of the pending step is accepted,
//     or is a duplicate when the checkpoint holds it. A re-placement cut
//     between PREPARE and COMMIT comes back paused with what it prepared
//     (shard_reshard_restore.cc).
//   * Guarantee, BSP with every_steps: 1: a restore is exact. Answers that
//     carry version v (PushPull of step v - 1, Pull with min_version v) are
//     held back until a checkpoint with every chunk at version >= v is
//     durable (fsynced and renamed), so no worker holds parameters that the
//     shard can lose: after a crash the restored shard is at the workers'
//     step (their retries are accepted) or one ahead (their retries are
//     stale and answered with the new parameters), and the job ends
//     bitwise identical to an undisturbed run (without backup_workers,
//     whose quorum depends on arrival order anyway). The price is one
//     checkpoint write per step on each step's latency, under no lock.
//     The tables' answers are held back the same way (JobTables::
//     GateAnswers: a sparse answer carrying version v waits until a
//     checkpoint holding the tables at >= v is durable), also on a shard
//     holding no dense chunk of the job, so after a crash the restored
//     tables are at the workers' step or one ahead too.
//   * Otherwise, BSP: the workers may be past the restored version; their
//     pushes (and pulls beyond version + 1) then fail with
//     FAILED_PRECONDITION "... restarted and restored job j from its
//     checkpoint of step r; the updates after it are lost ...", so the job
//     fails loudly instead of mixing parameter versions across shards.
//     ASP/SSP: updates applied after the checkpoint are lost (as if never
//     pushed); retries of pushes the checkpoint holds stay duplicates;
//     training goes on. Sparse tables follow the same rules: a BSP push
//     of a step beyond the restored tables' version fails
//     INVALID_ARGUMENT naming the restore (counted as sparse_bad_request),
//     a retry of the restored pending step is a duplicate or is accepted;
//     a pull beyond it waits and fails at its deadline.
//   * A job that asks for checkpoints on a shard without checkpoint_dir runs
//     without them: a warning is logged and JobStats.rejected has
//     "no_checkpoint_dir" = 1. A failed write is logged and counted under
//     "checkpoint_failed"; training goes on. DropJob deletes the job's
//     checkpoints.
//
// Internals (server/internal/, one file per room; job.h draws a job's parts
// and their locks): registration.h builds a job, validation.h checks
// requests, consistency.h holds the BSP/ASP/SSP rules, waits.h the waiting
// calls and deadlines, checkpointer.h checkpoint scheduling and restores,
// job_stats.h the statistics. The Shard keeps the job map and the budget.
//
// Thread safety: every method may be called concurrently from any thread.
// Locks: a reader/writer mutex over the job map (held only to look a job up
// or change the map), one mutex per chunk (held while a push, an apply or a
// read of that chunk runs; never two at once), a per-job mutex for the
// membership, SSP clocks and the registry of waits (never held with a
// chunk's), and leaf mutexes counting rejections.
// Checkpointing adds a per-job write mutex (held while one checkpoint is
// copied and written; before the membership and chunk mutexes), a per-job
// leaf mutex deciding when the next one is due (taken only after a BSP
// apply or when a time or ASP step threshold passed), and the writer
// thread's queue.
// A BSP or ASP push that completes at once takes only the job map's reader
// lock and its chunks' mutexes (counters are atomics), so pushes to
// different chunks do not contend; a wait also registers under the job
// mutex, and an SSP push updates its clock there. Callbacks (`done`) never
// run under a shard lock, so they may call back into the Shard.
//
// Life cycle of a wait (PushPull, Pull):
//
//   call --validate--> fail now (done(error))
//     |
//     +--> pending --(conditions met: a push/apply/SetMembership)--> done(OK)
//             |------(CheckDeadlines past step_deadline_ms)------->
//             done(DEADLINE_EXCEEDED)
//             |------(DropJob)------------------------------------>
//             done(ABORTED)
//             +------(Shutdown / destruction)---------------------->
//             done(UNAVAILABLE)
#ifndef SERVER_SHARD_H_
#define SERVER_SHARD_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/defaults.h"
#include "proto/ps.pb.h"
#include "server/checkpoint.h"
#include "server/push_input.h"
#include "server/shard_options.h"
#include "server/sparse/sparse_request.h"
#include "server/stats.h"

namespace ps {
class JobTables;
namespace internal {
class Checkpointer;
class ReplicaView;
class Replicator;
class Job;
struct Chunk;
struct FetchTally;
struct PushCounts;
struct ReplacementPlan;
struct Waiter;
}  // namespace internal

class Shard {
 public:
  explicit Shard(ShardOptions options);
  // Shutdown(), then frees everything. No call may be in progress or start.
  ~Shard();

  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  // A chunk's parameters encoded for replies (see PushPull).
  using SharedBytes = std::shared_ptr<const std::string>;

  // Creates the job's local chunks (those whose placement names this shard,
  // as primary or backup) with their initial values and optimizer state:
  // spec.init's warm start when set (every copy from the same source, so a
  // replicated job's copies agree from version 0), unless req.joining (a
  // copy that rejoins takes the live copies' state). Idempotent: the same
  // (spec, placement, num_workers) again is OK and changes nothing. Errors:
  // INVALID_ARGUMENT naming the field for a bad spec/placement,
  // FAILED_PRECONDITION when the job exists with another spec,
  // RESOURCE_EXHAUSTED over the memory budget, UNAVAILABLE after Shutdown().
  // num_workers = req.num_workers, or spec.num_workers when 0 (they must
  // agree when both are set). ConsistencySpec mode UNSPECIFIED means BSP.
  // Blocks while initialising the chunks (CPU-bound, no lock held).
  absl::Status RegisterJob(const RegisterJobRequest& req,
                           RegisterJobResponse* resp);

  // Frees the job. Its pending waits complete with ABORTED. Dropping an
  // unknown job is OK (so a retried drop succeeds).
  absl::Status DropJob(const DropJobRequest& req);

  // Sets the ranks that count toward the BSP quorum and SSP's slowest
  // worker (all of [0, num_workers) at registration). Pushes from inactive
  // ranks are rejected (FAILED_PRECONDITION). May complete pending BSP steps
  // and SSP waits; their callbacks run on this thread before it returns.
  absl::Status SetMembership(const SetMembershipRequest& req);

  // Pushes gradients and answers with the parameters of the pushed chunks
  // (see the class comment for when). Never blocks: calls `done` exactly
  // once, on this thread or later on another (the one whose push completes
  // the wait, or CheckDeadlines, DropJob, Shutdown). `resp` must stay valid
  // until `done` runs and is written only before it.
  //
  // With `payloads` (the RPC layer's zero-copy path), each ChunkData of the
  // reply leaves `data` empty and `payloads` gets that chunk's encoded
  // parameters instead, in the same order: encoded once per version and
  // shared by every reply carrying it. Same lifetime rule as `resp`.
  void PushPull(const PushPullRequest& req, PushPullResponse* resp,
                std::function<void(absl::Status)> done,
                std::vector<SharedBytes>* payloads = nullptr);
  // The same with the gradients in `gradients` (req.gradients is ignored):
  // the RPC layer's path, which decodes them in place from the received
  // bytes (server/push_input.h). BSP keeps a dense FP32 payload that comes
  // with a keep where it arrived until its step is applied, instead of
  // copying it.
  // hold_until (also Push's): a push the pause of a re-placement refuses is
  // held until then, at most kMaxPauseHold (internal/held_pushes.h; `req`
  // and `gradients` then live until `done`). InfinitePast: answered at once.
  void PushPull(const PushPullRequest& req, const GradientsIn& gradients,
                PushPullResponse* resp, std::function<void(absl::Status)> done,
                std::vector<SharedBytes>* payloads = nullptr,
                absl::Time hold_until = absl::InfinitePast());

  // Reads parameters (chunk_ids, or every local chunk when empty) once every
  // one is at version >= min_version, and under SSP once
  // step - slowest <= staleness. Same callback contract as PushPull.
  void Pull(const PullRequest& req, PullResponse* resp,
            std::function<void(absl::Status)> done,
            std::vector<SharedBytes>* payloads = nullptr);

  // A worker's sparse step with this shard's part of the job's tables
  // (server/sparse/job_tables.h has the rules). INVALID_ARGUMENT for a job
  // without tables. Same callback contract as PushPull; `req` must stay
  // valid until `done` runs too. The RPC layer calls the second form with
  // a request decoded from the wire (server/rpc/sparse_decoder.h); the
  // first converts (tests, in-process callers). Replicated: to the copy of
  // req.table_shard's rows (UNAVAILABLE where another shard serves it).
  void SparseExchange(const SparseExchangeRequest& req,
                      SparseExchangeResponse* resp,
                      std::function<void(absl::Status)> done);
  void SparseExchange(SparseRequestIn* req, SparseReplyOut* resp,
                      std::function<void(absl::Status)> done);
  // Pushes gradients without waiting for anything, except in a replicated
  // ASP/SSP job: then until every live backup holds the push (at most the
  // job's step deadline). May complete other calls' waits (their callbacks
  // run on this thread before it returns).
  absl::Status Push(const PushRequest& req, PushResponse* resp);
  // The same, answered through `done` (psd): a replicated ASP/SSP job's
  // push is acknowledged once every live backup holds it.
  void Push(const PushRequest& req, PushResponse* resp,
            std::function<void(absl::Status)> done,
            absl::Time hold_until = absl::InfinitePast());

  // Fills `out` completely (every job, or only req.job_id; an unknown job
  // gives no job_stats). Never blocks on a push longer than one chunk's
  // apply. Field meanings beyond proto/ps.proto's comments:
  //   JobStats.version  the lowest version among this shard's chunks;
  //   JobStats.step     BSP: the step being aggregated (= version); ASP/SSP:
  //                     the slowest active worker's pushed steps;
  //   missing_workers   BSP: active ranks whose gradient for `step` is
  //                     missing on some chunk still at that step;
  //   bytes_held        parameters, optimizer state and (BSP) the
  //                     per-worker gradient buffers: what the budget counts;
  //   WorkerStats.staleness  of the worker's latest push (max over its
  //                     chunks of chunk version - gradient version; BSP uses
  //                     the step as the gradient's version);
  //   rejected          keys: unknown_job, worker_out_of_range,
  //                     inactive_worker, unknown_chunk, chunk_not_on_shard,
  //                     duplicate_chunk, wrong_size, bad_format,
  //                     bad_indices, bad_delta (a bad `held` entry, a
  //                     pushed base_version), version_ahead,
  //                     future_step, non_finite, bad_membership,
  //                     ahead_of_restore (a push/pull past a restored
  //                     version), no_checkpoint_dir (1: the spec asks for
  //                     checkpoints, this shard has none), checkpoint_failed
  //                     (writes that failed), no_tables,
  //                     sparse_bad_request, sparse_over_budget
  //                     (SparseExchange), paused, old_placement,
  //                     placement_ahead (Reshard) (per job); unknown_job,
  //                     bad_spec, spec_mismatch, over_budget, shutdown,
  //                     wrong_shard (a heartbeat for another shard id)
  //                     (ShardStats.rejected);
  //   checkpoints       written by this process for the job (the one at
  //                     registration included);
  //   restored_from_step  the step of the checkpoint this process restored
  //                     the job from (0: registered fresh, or restored at
  //                     step 0).
  void Stats(const StatsRequest& req, ShardStats* out) const;

  // Step timelines (psctl trace): records the PushPull answers and applies
  // of the window's steps from now on (dropping earlier spans), bounded by
  // kTraceMaxSpans. FAILED_PRECONDITION for an unknown job, INVALID_ARGUMENT
  // for an empty window or one over kTraceMaxSteps. The push path pays one
  // relaxed load pair per request outside the window.
  absl::Status SetTrace(const SetTraceRequest& req);
  // The spans recorded so far (FAILED_PRECONDITION for an unknown job).
  absl::Status GetTrace(const ShardTraceRequest& req, ShardTrace* out) const;

  // Fails every wait whose deadline (start + step_deadline_ms) is <= now
  // with DEADLINE_EXCEEDED naming the missing workers, e.g. "job j step 12:
  // no gradient from workers 1, 2 after 60000 ms". psd calls it every
  // ~100 ms; tests pass a future time instead of sleeping.
  void CheckDeadlines(absl::Time now);

  // Waits (PushPull, Pull) not yet completed.
  size_t PendingWaits() const;

  // The workers of every job on this shard, summed (each job's
  // num_workers): the peers its replies go to, for pacing each connection
  // at the link's rate / this (PsdConfig.link_rate_mbit).
  uint32_t WorkerSlots() const;

  // Completes every pending wait with UNAVAILABLE; later calls fail with
  // UNAVAILABLE (Stats keeps working). Then stops the checkpoint writer and
  // writes a last checkpoint of every job that changed since its previous
  // one (blocks on that I/O). Idempotent.
  void Shutdown();

  // What OpenCheckpoints found.
  struct RestoreReport {
    // One line per restored job: "job \"j\" at step 12 from <file>".
    std::vector<std::string> restored;
    // One line per file or job that could not be used, naming the file.
    std::vector<std::string> problems;
  };

  // Opens options.checkpoint_dir (creating it), re-creates every job that
  // has a checkpoint of this shard there (see the class comment), and starts
  // the background writer. Call once, before any other call (psd: before it
  // listens). A no-op when checkpoint_dir is empty. Unusable checkpoints do
  // not fail it: they are listed in `report`. INVALID_ARGUMENT naming
  // checkpoint_dir when the directory cannot be created or read;
  // FAILED_PRECONDITION when jobs already exist or it ran before. Blocks on
  // reading every checkpoint.
  absl::Status OpenCheckpoints(RestoreReport* report);

  // Writes a checkpoint of the job now, on this thread; returns once it is
  // durable (or failed: the write's error). FAILED_PRECONDITION for an
  // unknown job or one without checkpoints.
  absl::Status CheckpointNow(const std::string& job_id);

  // Queues the checkpoints that every_seconds makes due by `now` (psd calls
  // it with CheckDeadlines). Never blocks on I/O.
  void CheckCheckpoints(absl::Time now);

  // Blocks until the background writer has written every checkpoint queued
  // so far (tests; a graceful stop gets the same from Shutdown).
  void FlushCheckpoints();

  // Sparse table export (proto/ps.proto ExportRowsRequest): the rows of
  // table req.table() of job req.job_id() held here, as SparseRows
  // messages passed to `send` in order. `send` may block (flow control);
  // an error from it stops the export and is returned. FAILED_PRECONDITION
  // for a job not held, NOT_FOUND naming a table the job lacks,
  // INVALID_ARGUMENT for max_message_bytes over kMaxExportMessageBytes.
  // Memory: one stripe's copy (SparseTable::Save) and one message.
  static constexpr uint32_t kDefaultExportMessageBytes = 1 << 20;
  static constexpr uint32_t kMaxExportMessageBytes = 3 << 20;
  absl::Status ExportRows(
      const ExportRowsRequest& req,
      const std::function<absl::Status(const SparseRows&)>& send) const;

  // Replicated jobs (JobSpec.replication > 1; server/internal/replicator.h
  // and docs/OPERATIONS.md "Replication"). Each chunk's copies are created
  // on its primary and backups at RegisterJob; only its acting primary
  // (the first copy the coordinator has not failed) serves pushes and pulls
  // (a backup answers UNAVAILABLE, reason not_acting_primary), and an
  // answer carrying version v waits until every live backup acknowledged v.
  //
  // How forwards reach other shards (psd: gRPC). Call before serving;
  // without it forwards fail and answers wait for their deadline.
  using ReplicaSender = std::function<absl::Status(const std::string& address,
                                                   const ReplicateRequest& req,
                                                   absl::Time deadline)>;
  void SetReplicaSender(ReplicaSender sender);
  // The coordinator's view (heartbeat and failover): FAILED_PRECONDITION
  // for an older epoch than held. A new epoch promotes this shard's backups
  // whose primaries failed and drops failed backups from the forwards;
  // joining shards get copies. resp->behind: the joining shards this
  // shard has not finished copying to.
  absl::Status SetReplicaView(const SetReplicaViewRequest& req,
                              SetReplicaViewResponse* resp);
  // A primary's forward (see internal::ApplyReplica for what is refused:
  // a stale epoch is the fence). Blocks only on the chunks' locks.
  absl::Status Replicate(const ReplicateRequest& req);
  // This process's incarnation (SetReplicaViewResponse.incarnation).
  uint64_t incarnation() const { return incarnation_; }

  // Live re-placement of a BSP job's dense chunks (proto/ps.proto
  // ReshardRequest has the phases; server/internal/reshard.h the rules).
  // Requests of an older Placement.epoch than the job's fail ABORTED, of a
  // later one UNAVAILABLE; while paused at step B, BSP pushes of steps >= B
  // fail UNAVAILABLE (reason paused). Errors: NOT_FOUND for a job not held,
  // INVALID_ARGUMENT naming the field (epoch not past the job's, a
  // placement that does not cut the job's chunks, spec.replication,
  // spec.tables, spec.consistency.mode, phase), FAILED_PRECONDITION for a
  // phase out of order, RESOURCE_EXHAUSTED over the budget; none changes
  // anything. PREPARE blocks on the fetches (each within fetch_deadline);
  // COMMIT on a checkpoint of the new layout when the job checkpoints.
  absl::Status Reshard(const ReshardRequest& req, ReshardResponse* resp);
  // Another shard's PREPARE (internal::CopyChunks). Never blocks long.
  absl::Status FetchChunks(const FetchChunksRequest& req,
                           FetchChunksResponse* resp);
  // How a PREPARE reaches other shards (psd: gRPC). Call before serving;
  // without it a PREPARE that must fetch fails.
  using ChunkFetcher = std::function<absl::Status(
      const std::string& address, const FetchChunksRequest& req,
      absl::Time deadline, FetchChunksResponse* resp)>;
  void SetChunkFetcher(ChunkFetcher fetcher);

 private:
  // FindJob's answer for a job not held: FAILED_PRECONDITION, or
  // UNAVAILABLE (the clients retry, elsewhere once the coordinator moved
  // the shard) while the view says this shard was failed over or is
  // joining, while the coordinator has not yet named this incarnation, or
  // within unknown_job_grace of the start before any view or registration
  // arrived.
  absl::Status UnknownJob(const std::string& job_id) const;
  // SetReplicaView's work once the epoch moved: fencing, promotions,
  // dropped backups, forwards to joining shards.
  void ApplyViewChange(const SetReplicaViewRequest& req,
                       const std::vector<uint32_t>& newly_failed);
  using JobPtr = std::shared_ptr<internal::Job>;
  // Replicated ASP/SSP: pushes are answered once their chunks' versions
  // reached every live backup (Waiter::need_replicated).
  static bool AwaitsReplicas(const internal::Job& job);
  static void SetReplicaNeeds(internal::Waiter* w);

  // `done` wrapped to record a TRACE_SHARD_REQUEST span from start_ns
  // (unix ns) until it runs.
  static std::function<void(absl::Status)> TracedDone(
      const JobPtr& job, uint32_t worker, uint64_t step, int64_t start_ns,
      std::function<void(absl::Status)> done);
  // The job, or FAILED_PRECONDITION naming job_id (counted).
  absl::StatusOr<JobPtr> FindJob(const std::string& job_id) const;
  // Every job, for a pass over them without the map lock.
  std::vector<JobPtr> AllJobs() const;
  // UNAVAILABLE, counted.
  absl::Status ShuttingDown() const;

  // A push the pause refused (`refused`), held until hold_until or run again
  // (`again`) at once; false: the caller answers `refused` (internal/
  // held_pushes.h). `answer` answers the held push from elsewhere.
  bool HeldForPause(internal::Job& job, uint64_t step,
                    const absl::Status& refused, absl::Time hold_until,
                    std::function<void()> again,
                    std::function<void(absl::Status)> answer);
  // Validates and applies a push, completes the waits it satisfies and
  // queues a checkpoint if one became due. On success `chunks` lists the
  // pushed chunks.
  absl::StatusOr<internal::PushCounts> ApplyPush(
      const JobPtr& job, uint32_t worker, uint64_t step,
      const GradientsIn& gradients, std::vector<internal::Chunk*>* chunks);

  // Registration. `local_count` = the job's chunks on this shard.
  absl::StatusOr<JobPtr> NewJob(const RegisterJobRequest& req,
                                int* local_count) const;
  // Replicated jobs with tables (shard_sparse.cc): the copies of rows a
  // job keeps here; the copy for `table_shard` (-1: this shard's); a
  // forward to a copy; SetReplicaViewResponse.behind.
  absl::Status AttachTableReplicas(const JobPtr& job) const;
  absl::StatusOr<JobTables*> TablesFor(internal::Job& job,
                                       int64_t table_shard) const;
  absl::Status ReplicateTables(internal::Job& job, const ReplicateRequest& req);
  std::vector<uint32_t> ReplicaBehind() const;
  // Reserves the job's bytes: true, or false when the same job is
  // registered already (resp filled), or fails as RegisterJob documents.
  absl::StatusOr<bool> Reserve(const internal::Job& job, int local_count,
                               RegisterJobResponse* resp);
  // Releases the reservation and adds the initialised job to the map:
  // true, or false when a concurrent registration of the same job won
  // (resp filled), or fails as RegisterJob documents.
  absl::StatusOr<bool> Admit(const JobPtr& job, int local_count,
                             const absl::Status& init_status,
                             RegisterJobResponse* resp);
  // OK (filling resp) when `job` registers the same as `existing`.
  absl::Status SameRegistration(const internal::Job& existing,
                                const internal::Job& job,
                                RegisterJobResponse* resp) const;
  absl::Status OverBudget(const internal::Job& job, int local_count) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool FitsBudget(uint64_t bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return bytes <=
           options_.memory_budget_bytes - bytes_held_ - bytes_reserved_;
  }
  // Live re-placement (shard_reshard.cc): the job, or NOT_FOUND; a phase
  // each; the budget's share of a PREPARE's fetched chunks.
  absl::StatusOr<JobPtr> HeldJob(const std::string& job_id) const;
  absl::Status PauseJob(const JobPtr& job, const ReshardRequest& req,
                        ReshardResponse* resp);
  absl::Status PrepareJob(const JobPtr& job, const ReshardRequest& req,
                          ReshardResponse* resp);
  // PREPARE's job built (blocks on the fetches), its rows reserved (into
  // plan.fetch_bytes, also on an error), written as prepared if it checkpoints.
  absl::StatusOr<internal::FetchTally> BuildPrepared(
      const internal::Job& job, const ReshardRequest& req, uint64_t step,
      internal::ReplacementPlan& plan, internal::FetchTally* rows);
  absl::Status CommitJob(const JobPtr& job, const ReshardRequest& req,
                         ReshardResponse* resp);
  absl::Status AbortJob(const JobPtr& job, const ReshardRequest& req);
  // Puts `next` in the place of `old` (checkpoint, carried state, map).
  absl::Status InstallReplacement(const JobPtr& old, const JobPtr& next,
                                  uint64_t reserved);
  // A dropped job's re-placement ends (its reserved bytes go back).
  void ReleaseReplacement(internal::Job& job);
  // RESOURCE_EXHAUSTED naming memory_budget_bytes, the shard and `what`.
  absl::Status ReserveBytes(const internal::Job& job, uint64_t bytes,
                            absl::string_view what);
  void ReleaseBytes(uint64_t bytes);
  // shard_reshard_restore.cc: a COMMIT against the prepared job (with
  // job.replacement.mu held); what a PREPARE wrote before a restart, loaded
  // and put back paused at `step`.
  absl::Status CheckPrepared(const internal::Job& job,
                             const ReshardRequest& req);
  void RestorePrepared(const std::string& job_id, RestoreReport* report);
  absl::StatusOr<JobPtr> LoadPrepared(const JobPtr& old, uint64_t* step,
                                      std::string* path) const;
  absl::Status PausePrepared(const JobPtr& old, const JobPtr& next,
                             uint64_t step);

  // Re-creates job `job_id` from its newest intact checkpoint, reporting
  // the outcome.
  void RestoreFromCheckpoint(const std::string& job_id, RestoreReport* report);
  // Adds a restored job to the map, within the budget.
  absl::Status AdmitRestored(const JobPtr& job, int local_count);

  const ShardOptions options_;
  const absl::Time start_time_;
  const uint64_t incarnation_;
  // A job was registered since the start: the coordinator has talked to
  // this process, so unknown_job_grace is over (UnknownJob).
  std::atomic<bool> registered_{false};

  mutable absl::Mutex mu_;  // the job map and memory accounting
  absl::flat_hash_map<std::string, JobPtr> jobs_ ABSL_GUARDED_BY(mu_);
  uint64_t bytes_held_ ABSL_GUARDED_BY(mu_) = 0;
  // Bytes promised to registrations still initialising their chunks.
  uint64_t bytes_reserved_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;

  std::atomic<uint64_t> next_waiter_id_{0};

  // Rejections not attributable to a registered job, by reason.
  mutable ReasonCounts rejected_;

  // Checkpoint scheduling and the background writer; disabled until
  // OpenCheckpoints opens a store.
  std::unique_ptr<internal::Checkpointer> checkpointer_;

  // Replicated jobs: the coordinator's view and the forwards to backups.
  const std::shared_ptr<internal::ReplicaView> replica_view_;
  const std::unique_ptr<internal::Replicator> replicator_;

  mutable absl::Mutex fetcher_mu_;  // a leaf
  ChunkFetcher fetcher_ ABSL_GUARDED_BY(fetcher_mu_);
};

}  // namespace ps

#endif  // SERVER_SHARD_H_
