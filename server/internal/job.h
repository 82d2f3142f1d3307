// The state of one job on a shard (server/shard.h), internal to the shard:
// its chunks, its waits, and the parts of it that each room of the shard
// owns, each under its own lock.
//
//   Job                immutable configuration and the chunks
//   ├─ Chunk           one chunk's values and aggregation state (Chunk::mu)
//   ├─ WaitState       membership, SSP clocks, registry of waits (mu)
//   ├─ JobTables       the sparse tables, their consistency and waits
//   │                  (own locks, never held with the others)
//   ├─ JobCounters     statistics, lock-free
//   ├─ ReasonCounts    rejections (a leaf mutex)
//   ├─ CheckpointSchedule  when the next checkpoint is due (a leaf mutex)
//   ├─ CheckpointFiles the checkpoint files (write mutex)
//   └─ Replacement     a live re-placement in progress (reshard.h; mu)
//
// Lock order: Replacement::mu, then CheckpointFiles::mu, then
// Job::membership_update_mu, then
// WaitState::mu or one Chunk::mu (never WaitState::mu with a chunk's, never
// two chunks') or JobTables' mutex (a checkpoint's copy of the tables).
// A re-placement's commit holds the old job's locks, in that order, around
// the new job's (which nobody else sees yet).
// CheckpointSchedule::mu comes before JobTables' mutex only (deciding
// whether a BSP checkpoint is due reads the tables' version); it and
// ReasonCounts are otherwise leaves.
// Who does what with it: registration.h builds it, validation.h checks
// requests against it, consistency.h applies pushes, waits.h answers and
// fails waits, checkpointer.h saves and restores it, job_stats.h reports it.
#ifndef SERVER_INTERNAL_JOB_H_
#define SERVER_INTERNAL_JOB_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/defaults.h"
#include "common/trace_recorder.h"
#include "proto/job.pb.h"
#include "proto/ps.pb.h"
#include "server/chunk_state.h"
#include "server/internal/delta.h"
#include "server/internal/held_pushes.h"
#include "server/internal/replica_view.h"
#include "server/internal/table_replicas.h"
#include "server/optimizer.h"
#include "server/sparse/job_tables.h"
#include "server/stats.h"

namespace ps {
namespace internal {

// A chunk's parameters encoded for replies (Shard::SharedBytes).
using SharedBytes = std::shared_ptr<const std::string>;
using ChunkDataList = google::protobuf::RepeatedPtrField<ChunkData>;

class Job;
struct Chunk;

// The most copies of a chunk (JobSpec.replication <= 3).
inline constexpr size_t kMaxChunkCopies = 3;

// Job::pause_step when the job is not paused for a re-placement.
inline constexpr uint64_t kNotPaused = UINT64_MAX;

// Whether a push of `step` waits out a re-placement paused at `pause`
// (Job::pause_step): under BSP from the pause step on; under ASP and SSP
// every push, since their chunks share no step boundary.
inline bool PushPaused(ConsistencyMode mode, uint64_t step, uint64_t pause) {
  return mode == BSP ? step >= pause : pause != kNotPaused;
}

// The requests whose answer time JobCounters.request_ns keeps
// (JobStats.request_seconds), in RequestMethodName's order.
enum RequestMethod : uint8_t {
  kPushPullMethod,
  kPullMethod,
  kPushMethod,
  kSparseExchangeMethod,
  kNumRequestMethods
};
// "PushPull", "Pull", "Push", "SparseExchange".
const char* RequestMethodName(RequestMethod m);

// A wait: a PushPull or Pull whose answer is due once every chunk in
// `chunks` is at version >= need_version and the slowest active worker's
// clock is >= need_clock. `pending` counts the unmet conditions plus one
// guard held during registration; whoever takes it to 0 completes the wait.
// Whoever sets `claimed` first (completion, deadline, drop, shutdown) runs
// `done`; the other paths then leave the waiter alone.
struct Waiter {
  // Immutable once StartWait() runs.
  uint64_t id = 0;
  std::vector<Chunk*> chunks;
  uint64_t step = 0;
  uint64_t need_version = 0;  // 0 = no version condition
  uint64_t need_clock = 0;    // 0 = no SSP condition
  absl::Time deadline;
  // Borrowed from the caller's response; null for a Push (no parameters).
  ChunkDataList* out = nullptr;
  // Borrowed from the caller: the payloads, when it takes them shared.
  std::vector<SharedBytes>* payloads = nullptr;
  // False when it completed at once without entering WaitState::live.
  bool registered = true;
  // Replicated jobs: per entry of `chunks`, the version whose replication
  // the answer waits for (ASP/SSP: the push's update and every one before
  // it; BSP: need_version, set by StartWait); empty = none.
  std::vector<uint64_t> need_replicated;
  // Delta pulls: the asking worker and, per entry of `chunks`, the version
  // it holds (kNoBase: none); empty = every chunk in full.
  uint32_t worker = 0;
  std::vector<uint64_t> bases;
  // When the request arrived (absl::GetCurrentTimeNanos) and what it was:
  // Complete records the answer time in JobCounters.request_ns.
  int64_t start_ns = 0;
  RequestMethod method = kPushPullMethod;

  std::atomic<int> pending{1};
  std::atomic<bool> claimed{false};
  // Owned by the claimer once `claimed` is set. Released after `done` runs
  // so that waiters left in chunk lists do not keep the job alive.
  std::shared_ptr<Job> job;
  std::function<void(absl::Status)> done;
};
using WaiterPtr = std::shared_ptr<Waiter>;

struct Chunk {
  explicit Chunk(ChunkState s, std::vector<uint8_t> members)
      : placement(s.placement),
        length(s.placement.length()),
        state(std::move(s)),
        active(std::move(members)) {}

  const ChunkPlacement placement;
  const uint64_t length;

  absl::Mutex mu;
  ChunkState state ABSL_GUARDED_BY(mu);
  // The job's membership, copied here so the BSP quorum is decided under
  // this lock alone (SetMembership updates every chunk's copy).
  std::vector<uint8_t> active ABSL_GUARDED_BY(mu);
  // Waits for a later version of this chunk; claimed ones are pruned
  // lazily.
  std::vector<WaiterPtr> waiters ABSL_GUARDED_BY(mu);
  // == state.version, readable without the lock (it only grows).
  std::atomic<uint64_t> version{0};
  // state.values encoded for replies at version `encoded_version`, shared
  // by every reply of that version (BSP: one per worker). Immutable while
  // a reply holds it; rewritten in place only when nothing else does.
  std::shared_ptr<std::string> encoded ABSL_GUARDED_BY(mu);
  uint64_t encoded_version ABSL_GUARDED_BY(mu) = 0;
  // The ChunkData.format of `encoded`: the job's wire format, or FP32 (0)
  // when the values did not fit it.
  WireFormat encoded_format ABSL_GUARDED_BY(mu) = WIRE_FORMAT_UNSPECIFIED;
  // Delta pulls (Job::delta_pulls): which entries changed when, and the
  // last delta encoded for replies (shared like `encoded`).
  ChangeLog changes ABSL_GUARDED_BY(mu);
  std::shared_ptr<DeltaEncoding> delta ABSL_GUARDED_BY(mu);
  // Guarded by the job's CheckpointSchedule::mu: the checkpoint step this
  // chunk was last counted as having reached (see checkpointer.cc).
  uint64_t counted_for = UINT64_MAX;
  // Replicated jobs, while this shard is the chunk's acting primary: the
  // version every live backup acknowledged (Replicator).
  std::atomic<uint64_t> replicated{0};
  // Replicated jobs: the answers waiting for `replicated` to reach a
  // version (Waiter::need_replicated); raised first, then released under
  // this lock, so a wait filed under it is never missed.
  std::vector<std::pair<WaiterPtr, uint64_t>> replica_waiters
      ABSL_GUARDED_BY(mu);
  // By copy (0: placement.shard(), i: backups(i - 1)): 1 + the version that
  // copy acknowledged, 0 when none since it (re)joined (Replicator).
  std::array<std::atomic<uint64_t>, kMaxChunkCopies> acked{};
  // By copy, as `acked`: 1 + the newest version queued or in flight to that
  // copy (0: none), so a version is forwarded once while a newer one may
  // follow it before its acknowledgement (Replicator).
  std::array<std::atomic<uint64_t>, kMaxChunkCopies> forwarding{};
  // By copy, while that copy is joining (re-replication): it acknowledged
  // the chunk's version of the moment once, and from then on the answers
  // wait for it as for a live backup, so it stays caught up and every
  // answer after its primary reported it caught up is on it (0 again when
  // it (re)joins; Replicator).
  std::array<std::atomic<bool>, kMaxChunkCopies> synced{};
  // Backup side: a forward reached this chunk since the job was registered.
  std::atomic<bool> copied{false};
  // Replicated jobs warm-started from a job (init.from_job; warm_start.h):
  // whether this copy holds the job's initial state without a forward
  // (false for a backup's and a joining copy's: the source is on the
  // primary's shard only; `copied` then says it got it). Set before the
  // job is shared.
  bool initial_held = true;
  // The same jobs, while this shard is the chunk's acting primary: this
  // copy and every live backup (and synced joining one) hold the initial
  // state; until then answers of version 0 wait too (Replicator). Always
  // true for other jobs.
  std::atomic<bool> initial_replicated{true};
  // Replicated BSP jobs: the aggregated gradient that made version
  // `step_gradient_version` and its scale, so a backup holding the version
  // before gets the gradient instead of the state (ReplicaChunk.gradient).
  std::vector<float> step_gradient ABSL_GUARDED_BY(mu);
  float step_gradient_scale ABSL_GUARDED_BY(mu) = 0;
  uint64_t step_gradient_version ABSL_GUARDED_BY(mu) = 0;
};

// A worker's counters: lock-free so pushes to different chunks share no
// lock.
struct WorkerCounters {
  std::atomic<bool> pushed_any{false};
  std::atomic<uint64_t> last_step{0};
  std::atomic<uint64_t> pushes{0};
  std::atomic<uint64_t> staleness{0};

  // Steps this worker pushed (last_step + 1, 0 = none).
  uint64_t Steps() const {
    return pushed_any.load(std::memory_order_relaxed)
               ? last_step.load(std::memory_order_relaxed) + 1
               : 0;
  }
};

// The job's statistics (JobStats), lock-free.
struct JobCounters {
  std::atomic<uint64_t> pushes{0};
  std::atomic<uint64_t> pulls{0};
  std::atomic<uint64_t> bytes_in{0};  // ChunkData data + indices
  std::atomic<uint64_t> bytes_out{0};
  std::atomic<uint64_t> dense_bytes_in{0};  // the same as dense FP32
  std::atomic<uint64_t> dense_bytes_out{0};
  // Chunks that travelled as FP32 because a value did not fit the job's
  // wire format; `fallback_logged` once the first one was logged.
  std::atomic<uint64_t> wire_fallbacks{0};
  std::atomic<bool> fallback_logged{false};
  // Chunk reads answered with a delta / asked for one, answered in full.
  std::atomic<uint64_t> delta_pulls{0};
  std::atomic<uint64_t> delta_refused{0};
  std::atomic<uint64_t> duplicates{0};
  std::atomic<uint64_t> stale{0};
  std::atomic<uint64_t> applies{0};
  std::atomic<uint64_t> checkpoints{0};  // written by this process
  // Replicated jobs: chunk states acknowledged by a backup, and backups
  // dropped from the acknowledgement set (the coordinator failed them).
  std::atomic<uint64_t> replica_forwards{0};
  std::atomic<uint64_t> replica_drops{0};
  LatencyHistogram apply_ns;
  // Nanoseconds from a request's arrival to its answer, by RequestMethod.
  LatencyHistogram request_ns[kNumRequestMethods];
  PowerOfTwoHistogram staleness;
  std::unique_ptr<WorkerCounters[]> workers;  // num_workers of them
};

// When the next checkpoint is due. `mu` is taken alone (a leaf), after a
// chunk's new version was stored, so that of two concurrent appliers the
// later one sees both versions.
struct CheckpointSchedule {
  absl::Mutex mu;
  bool queued ABSL_GUARDED_BY(mu) = false;  // waiting for the writer
  uint64_t next_due_step ABSL_GUARDED_BY(mu) = 0;
  absl::Time next_due_time ABSL_GUARDED_BY(mu) = absl::InfiniteFuture();
  uint64_t pushes_at_snapshot ABSL_GUARDED_BY(mu) = 0;
  // BSP: chunks known to be at version >= next_due_step.
  size_t reached ABSL_GUARDED_BY(mu) = 0;
  // Sparse pushes accepted (every_seconds: whether anything changed), and
  // their count at the last snapshot.
  std::atomic<uint64_t> table_pushes{0};
  uint64_t table_pushes_at_snapshot ABSL_GUARDED_BY(mu) = 0;
  // Lock-free mirrors for the ASP/SSP pre-check on every push.
  std::atomic<uint64_t> next_due_step_hint{0};
  std::atomic<int64_t> next_due_time_ns{INT64_MAX};
};

// The job's checkpoint files. `mu` serializes the snapshots, the writes and
// the removal of the files; it comes before membership_update_mu.
struct CheckpointFiles {
  absl::Mutex mu;
  uint64_t sequence ABSL_GUARDED_BY(mu) = 0;  // of the last file
  bool removed ABSL_GUARDED_BY(mu) = false;   // dropped: write no more
  // Incremental tables checkpoints: the last tables file written by this
  // process (sequence, bytes, CRC32C), which the next increment applies
  // to, and the increments since the last full one. Not `chained`: the
  // next is full (none yet, after a restore, after a failed write).
  bool chained ABSL_GUARDED_BY(mu) = false;
  uint64_t chain_sequence ABSL_GUARDED_BY(mu) = 0;
  uint64_t chain_bytes ABSL_GUARDED_BY(mu) = 0;
  uint32_t chain_crc ABSL_GUARDED_BY(mu) = 0;
  uint32_t increments ABSL_GUARDED_BY(mu) = 0;
};

// Membership, SSP clocks and the registry of waits. One mutex, because a
// wait's conditions are checked and the wait filed atomically with the
// updates that release it. Never held together with a chunk's mutex.
struct WaitState {
  mutable absl::Mutex mu;
  std::vector<uint8_t> active ABSL_GUARDED_BY(mu);
  // SSP: per rank, highest step pushed + 1 (0 = none).
  std::vector<uint64_t> clock ABSL_GUARDED_BY(mu);
  std::vector<WaiterPtr> clock_waiters ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<uint64_t, WaiterPtr> live ABSL_GUARDED_BY(mu);
  // Not OK once dropped or shut down: new waits fail with it.
  absl::Status closed ABSL_GUARDED_BY(mu);
  // Set with `closed`, readable without the lock.
  std::atomic<bool> is_closed{false};
  // gate_replies: the lowest chunk version of the newest durable
  // checkpoint, and the waits held back until it reaches their
  // need_version.
  uint64_t durable_version ABSL_GUARDED_BY(mu) = 0;
  std::vector<WaiterPtr> durable_waiters ABSL_GUARDED_BY(mu);
};

// A live re-placement of the job on this shard (reshard.h, Shard::Reshard):
// the pause, and the job built under the new placement beside this one.
// `mu` is taken first (before every other lock of the job and the Shard's
// job map) and held only briefly: a PREPARE's fetches run without it.
struct Replacement {
  absl::Mutex mu;
  // The placement epoch and step the job pauses at; epoch 0 = no pause.
  uint64_t epoch ABSL_GUARDED_BY(mu) = 0;
  uint64_t step ABSL_GUARDED_BY(mu) = 0;
  // A PREPARE is fetching (without `mu`); `generation` moves whenever the
  // pause changes, so that a PREPARE overtaken by an ABORT or a new PAUSE
  // discards what it built.
  bool preparing ABSL_GUARDED_BY(mu) = false;
  uint64_t generation ABSL_GUARDED_BY(mu) = 0;
  // The job under the new placement (PREPARE done), what its PREPARE
  // answered, and the bytes of its fetched chunks reserved in the Shard's
  // budget until COMMIT or ABORT.
  std::shared_ptr<Job> prepared ABSL_GUARDED_BY(mu);
  ReshardResponse prepared_answer ABSL_GUARDED_BY(mu);
  uint64_t reserved ABSL_GUARDED_BY(mu) = 0;
  // Logged once per pause: the chunks reached the pause step.
  bool quiesced_logged ABSL_GUARDED_BY(mu) = false;
  // COMMIT replaced this job by `prepared`: it stays paused for good.
  bool committed ABSL_GUARDED_BY(mu) = false;
  // Sparse rows asked for by a new owner (FetchChunksRequest
  // .rows_for_shard), by that shard and placement: the stream made once
  // per pause, served in pieces (reshard_tables.h); dropped when the pause
  // changes or ends.
  std::map<std::string, std::shared_ptr<const std::string>> row_streams
      ABSL_GUARDED_BY(mu);
};

class Job {
 public:
  // Immutable after registration.
  std::string id;
  JobSpec spec;
  Placement placement;
  uint32_t num_workers = 0;
  // LR_RULE_LINEAR (JobSpec.lr_rule): the submitted num_workers. BSP: a
  // step's summed gradient is divided by this instead of by the pushes that
  // arrived, so the update grows linearly with them. ASP/SSP: each push is
  // applied with lr x active_count / this (a round of pushes, one per
  // active rank, is the global batch). 0: the rule is NONE.
  uint32_t linear_lr_workers = 0;
  ConsistencyMode mode = BSP;
  uint32_t staleness_bound = 0;
  uint32_t backup_workers = 0;
  uint32_t deadline_ms = kDefaultStepDeadlineMs;
  // Parameters are sent in this format (spec.wire.format; UNSPECIFIED and
  // FP32 alike mean FP32). Pushed gradients say their own.
  WireFormat wire_format = WIRE_FORMAT_UNSPECIFIED;
  // The chunks track their changes and answer HeldChunks with deltas
  // (WantsDeltaPulls: the spec asks for top-k pushes).
  bool delta_pulls = false;
  std::unique_ptr<const Optimizer> optimizer;
  // This shard's chunks. Shared: a re-placement's new job takes over the
  // chunks that stay on this shard as they are (the old one, until its last
  // call is gone, still points at them).
  std::vector<std::shared_ptr<Chunk>> chunks;
  // The job's sparse tables on this shard (null without JobSpec.tables):
  // their own rows, versions and waits (server/sparse/job_tables.h).
  std::unique_ptr<JobTables> tables;
  // Replicated (BSP) jobs with tables: every copy of table rows this shard
  // holds (its own are `tables`) and their forwards (table_replicas.h).
  // After `tables`, so that it stops before they go.
  std::unique_ptr<TableReplicas> table_replicas;
  std::vector<int32_t> local;  // chunk_id -> index in `chunks`, -1 = elsewhere
  uint64_t bytes = 0;          // accounted against the memory budget
  // What a checkpoint stores to re-create the job (num_workers resolved).
  RegisterJobRequest registration;

  // Checkpoints; immutable after registration. `checkpointing`: the spec
  // asks for them and the shard has a store. `gate_replies`: BSP with
  // every_steps 1, where answers wait until their version is durable.
  bool checkpointing = false;
  bool gate_replies = false;
  // JobSpec.replication > 1: `chunks` holds this shard's backups too; only
  // the chunks `view` makes this shard the acting primary of are served,
  // and answers wait until the backups have their version.
  bool replicated = false;
  std::shared_ptr<const ReplicaView> view;
  uint32_t every_steps = 0;
  uint32_t every_seconds = 0;
  // CheckpointSpec.tables_full_every resolved (1: every checkpoint full).
  uint32_t tables_full_every = 1;
  // Re-created from a checkpoint by this process, and the step it held.
  bool restored = false;
  uint64_t restored_from_step = 0;

  // Serializes SetMembership calls; held while it updates every chunk.
  // Acquired before WaitState::mu and before any chunk's mutex.
  absl::Mutex membership_update_mu;
  // Lock-free mirror of WaitState::active for request validation, so
  // pushes need no job-wide lock to check their sender.
  std::unique_ptr<std::atomic<bool>[]> is_active;
  // How many of is_active are set (ASP/SSP under LR_RULE_LINEAR).
  std::atomic<uint32_t> active_count{0};
  // Set (with the job's removal from the Shard's map) once a re-placement
  // replaced this job: a membership change then goes to its successor.
  bool retired ABSL_GUARDED_BY(membership_update_mu) = false;

  // Live re-placement (reshard.h): the pushes PushPaused names (BSP: of a
  // step >= pause_step; ASP/SSP: all) are refused (UNAVAILABLE, the client
  // retries), checked under each chunk's mutex before a push is buffered or
  // applied; kNotPaused = none.
  std::atomic<uint64_t> pause_step{kNotPaused};
  // Pushes refused by the pause, held until it moves (held_pushes.h).
  HeldPushes held_pushes;
  Replacement replacement;

  JobCounters counters;
  ReasonCounts rejected;  // JobStats.rejected
  // Step timelines (SetTrace): PushPull arrivals to answers and applies of
  // the window's steps.
  TraceRecorder trace;
  WaitState waits;
  CheckpointSchedule schedule;
  CheckpointFiles files;

  // This shard's chunk `chunk_id`, or null when it is elsewhere (the id
  // must be < placement.chunks_size()).
  Chunk* LocalChunk(uint32_t chunk_id) const {
    if (chunk_id >= local.size() || local[chunk_id] < 0) return nullptr;
    return chunks[local[chunk_id]].get();
  }

  // ASP/SSP: the slowest active worker's pushed steps (JobStats.step).
  uint64_t SlowestWorkerSteps() const;

  // The slowest active worker's clock (SSP).
  uint64_t MinActiveClock() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(waits.mu);

  // The lowest version among this shard's chunks (0 without chunks).
  uint64_t LowestVersion() const;

  // Replicated jobs: whether this shard serves `c` now (acting primary).
  bool Serves(const Chunk& c) const;

  // Replicated and warm-started from a job: the backups get the initial
  // state from the primary (Chunk::initial_held, initial_replicated).
  bool ForwardsInitialState() const {
    return replicated && spec.init().has_from_job();
  }
};

// "chunk 3 of tensor w": how messages name a chunk.
std::string ChunkName(const ChunkPlacement& p);

}  // namespace internal
}  // namespace ps

#endif  // SERVER_INTERNAL_JOB_H_
