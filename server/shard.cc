#include "server/shard.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/chunking.h"
#include "core/float_bytes.h"
#include "core/init.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/checkpoint.h"
#include "server/chunk_state.h"
#include "server/optimizer.h"
#include "server/stats.h"
#include "spdlog/spdlog.h"

namespace ps {
namespace {

// Keys of JobStats.rejected / ShardStats.rejected.
constexpr char kUnknownJob[] = "unknown_job";
constexpr char kWorkerOutOfRange[] = "worker_out_of_range";
constexpr char kInactiveWorker[] = "inactive_worker";
constexpr char kUnknownChunk[] = "unknown_chunk";
constexpr char kChunkNotOnShard[] = "chunk_not_on_shard";
constexpr char kDuplicateChunk[] = "duplicate_chunk";
constexpr char kWrongSize[] = "wrong_size";
constexpr char kVersionAhead[] = "version_ahead";
constexpr char kFutureStep[] = "future_step";
constexpr char kNonFinite[] = "non_finite";
constexpr char kBadMembership[] = "bad_membership";
constexpr char kBadSpec[] = "bad_spec";
constexpr char kSpecMismatch[] = "spec_mismatch";
constexpr char kOverBudget[] = "over_budget";
constexpr char kShutdown[] = "shutdown";
constexpr char kAheadOfRestore[] = "ahead_of_restore";
constexpr char kNoCheckpointDir[] = "no_checkpoint_dir";
constexpr char kCheckpointFailed[] = "checkpoint_failed";

// A worker's counters, for stats only: lock-free so pushes to different
// chunks share no lock.
struct WorkerCounters {
  std::atomic<bool> pushed_any{false};
  std::atomic<uint64_t> last_step{0};
  std::atomic<uint64_t> pushes{0};
  std::atomic<uint64_t> staleness{0};
};

void StoreMax(std::atomic<uint64_t>& a, uint64_t v) {
  uint64_t cur = a.load(std::memory_order_relaxed);
  while (cur < v &&
         !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

uint64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string ChunkName(const ChunkPlacement& p) {
  return absl::StrCat("chunk ", p.chunk_id(), " of tensor ", p.tensor());
}

absl::Status Prefixed(absl::string_view prefix, const absl::Status& st) {
  return absl::Status(st.code(), absl::StrCat(prefix, st.message()));
}

}  // namespace

// A wait: a PushPull or Pull whose answer is due once every chunk in
// `chunks` is at version >= need_version and the slowest active worker's
// clock is >= need_clock. `pending` counts the unmet conditions plus one
// guard held during registration; whoever takes it to 0 completes the wait.
// Whoever sets `claimed` first (completion, deadline, drop, shutdown) runs
// `done`; the other paths then leave the waiter alone.
struct Shard::Waiter {
  // Immutable once StartWait() runs.
  uint64_t id = 0;
  std::vector<Chunk*> chunks;
  uint64_t step = 0;
  uint64_t need_version = 0;  // 0 = no version condition
  uint64_t need_clock = 0;    // 0 = no SSP condition
  absl::Time deadline;
  ChunkDataList* out = nullptr;  // borrowed from the caller's response
  // Borrowed from the caller: the payloads, when it takes them shared.
  std::vector<Shard::SharedBytes>* payloads = nullptr;
  // False when it completed at once without entering Job::live.
  bool registered = true;

  std::atomic<int> pending{1};
  std::atomic<bool> claimed{false};
  // Owned by the claimer once `claimed` is set. Released after `done` runs
  // so that waiters left in chunk lists do not keep the job alive.
  std::shared_ptr<Job> job;
  std::function<void(absl::Status)> done;
};

struct Shard::Chunk {
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
  // Guarded by the job's due_mu: the checkpoint step this chunk was last
  // counted as having reached (see Job::NoteVersion).
  uint64_t counted_for = UINT64_MAX;
};

class Shard::Job {
 public:
  // Immutable after registration.
  std::string id;
  JobSpec spec;
  Placement placement;
  uint32_t num_workers = 0;
  ConsistencyMode mode = BSP;
  uint32_t staleness_bound = 0;
  uint32_t backup_workers = 0;
  uint32_t deadline_ms = kDefaultStepDeadlineMs;
  std::unique_ptr<const Optimizer> optimizer;
  std::vector<std::unique_ptr<Chunk>> chunks;  // this shard's chunks
  std::vector<int32_t> local;  // chunk_id -> index in `chunks`, -1 = elsewhere
  uint64_t bytes = 0;          // accounted against the memory budget
  // What a checkpoint stores to re-create the job (num_workers resolved).
  RegisterJobRequest registration;

  // Checkpoints; immutable after registration. `checkpointing`: the spec
  // asks for them and the shard has a store. `gate_replies`: BSP with
  // every_steps 1, where answers wait until their version is durable.
  bool checkpointing = false;
  bool gate_replies = false;
  uint32_t every_steps = 0;
  uint32_t every_seconds = 0;
  // Re-created from a checkpoint by this process, and the step it held.
  bool restored = false;
  uint64_t restored_from_step = 0;
  std::atomic<uint64_t> checkpoints{0};  // written by this process

  // Statistics, lock-free.
  std::atomic<uint64_t> pushes{0};
  std::atomic<uint64_t> pulls{0};
  std::atomic<uint64_t> bytes_in{0};
  std::atomic<uint64_t> bytes_out{0};
  std::atomic<uint64_t> duplicates{0};
  std::atomic<uint64_t> stale{0};
  std::atomic<uint64_t> applies{0};
  LatencyHistogram apply_ns;
  PowerOfTwoHistogram staleness;
  std::unique_ptr<WorkerCounters[]> workers;
  // Lock-free mirror of `active` for request validation, so pushes need no
  // job-wide lock to check their sender.
  std::unique_ptr<std::atomic<bool>[]> is_active;

  // Serializes this job's checkpoint snapshots, writes and the removal of
  // its files. Acquired before membership_update_mu.
  absl::Mutex write_mu;
  uint64_t sequence ABSL_GUARDED_BY(write_mu) = 0;  // of the last file
  bool removed ABSL_GUARDED_BY(write_mu) = false;   // dropped: write no more

  // When the next checkpoint is due. Taken alone (a leaf), after a chunk's
  // new version was stored, so that of two concurrent appliers the later
  // one sees both versions.
  absl::Mutex due_mu;
  bool queued ABSL_GUARDED_BY(due_mu) = false;  // waiting for the writer
  uint64_t next_due_step ABSL_GUARDED_BY(due_mu) = 0;
  absl::Time next_due_time ABSL_GUARDED_BY(due_mu) = absl::InfiniteFuture();
  uint64_t pushes_at_snapshot ABSL_GUARDED_BY(due_mu) = 0;
  // BSP: chunks known to be at version >= next_due_step.
  size_t reached ABSL_GUARDED_BY(due_mu) = 0;
  // Lock-free mirrors for the ASP/SSP pre-check on every push.
  std::atomic<uint64_t> next_due_step_hint{0};
  std::atomic<int64_t> next_due_time_ns{INT64_MAX};

  // Serializes SetMembership calls; held while it updates every chunk.
  // Acquired before `mu` and before any chunk's mutex.
  absl::Mutex membership_update_mu;

  // Never held together with a chunk's mutex.
  mutable absl::Mutex mu;
  std::vector<uint8_t> active ABSL_GUARDED_BY(mu);
  // SSP: per rank, highest step pushed + 1 (0 = none).
  std::vector<uint64_t> clock ABSL_GUARDED_BY(mu);
  std::vector<WaiterPtr> clock_waiters ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<uint64_t, WaiterPtr> live ABSL_GUARDED_BY(mu);
  absl::btree_map<std::string, uint64_t> rejected ABSL_GUARDED_BY(mu);
  // Not OK once dropped or shut down: new waits fail with it.
  absl::Status closed ABSL_GUARDED_BY(mu);
  // Set with `closed`, readable without the lock.
  std::atomic<bool> is_closed{false};
  // gate_replies: the lowest chunk version of the newest durable checkpoint,
  // and the waits held back until it reaches their need_version.
  uint64_t durable_version ABSL_GUARDED_BY(mu) = 0;
  std::vector<WaiterPtr> durable_waiters ABSL_GUARDED_BY(mu);

  // ASP/SSP: the slowest active worker's pushed steps (JobStats.step).
  uint64_t SlowestWorkerSteps() const {
    uint64_t slowest = UINT64_MAX;
    for (uint32_t r = 0; r < num_workers; ++r) {
      if (!is_active[r].load(std::memory_order_relaxed)) continue;
      const WorkerCounters& wc = workers[r];
      const uint64_t steps =
          wc.pushed_any.load(std::memory_order_relaxed)
              ? wc.last_step.load(std::memory_order_relaxed) + 1
              : 0;
      slowest = std::min(slowest, steps);
    }
    return slowest == UINT64_MAX ? 0 : slowest;
  }

  // BSP: counts `c` toward `reached` once it is at next_due_step.
  void NoteVersion(Chunk& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(due_mu) {
    if (c.version.load(std::memory_order_acquire) >= next_due_step &&
        c.counted_for != next_due_step) {
      c.counted_for = next_due_step;
      ++reached;
    }
  }

  // Sets when the next checkpoint is due after one of step `step`, taken
  // when pushes counted `pushes`.
  void ScheduleNext(uint64_t step, uint64_t pushes_then, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(due_mu) {
    pushes_at_snapshot = pushes_then;
    next_due_step = every_steps > 0 ? step + every_steps : UINT64_MAX;
    next_due_step_hint.store(next_due_step, std::memory_order_relaxed);
    next_due_time = every_seconds > 0 ? now + absl::Seconds(every_seconds)
                                      : absl::InfiniteFuture();
    next_due_time_ns.store(
        every_seconds > 0 ? absl::ToUnixNanos(next_due_time) : INT64_MAX,
        std::memory_order_relaxed);
    reached = 0;
    if (mode == BSP) {
      for (const std::unique_ptr<Chunk>& c : chunks) NoteVersion(*c);
    }
  }

  // Whether a checkpoint is due (not counting `queued`).
  bool Due(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(due_mu) {
    if (chunks.empty()) return false;  // nothing here ever changes
    if (every_steps > 0) {
      if (mode == BSP ? reached == chunks.size()
                      : SlowestWorkerSteps() >= next_due_step) {
        return true;
      }
    }
    return every_seconds > 0 && now >= next_due_time &&
           pushes.load(std::memory_order_relaxed) != pushes_at_snapshot;
  }

  // Moves the waits that `durable_version` now covers to `ready`.
  void ReleaseDurableWaiters(std::vector<WaiterPtr>* ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto keep = durable_waiters.begin();
    for (WaiterPtr& w : durable_waiters) {
      if (w->claimed.load(std::memory_order_acquire)) continue;
      if (w->need_version <= durable_version) {
        if (w->pending.fetch_sub(1) == 1) ready->push_back(std::move(w));
        continue;
      }
      *keep++ = std::move(w);
    }
    durable_waiters.erase(keep, durable_waiters.end());
  }

  void CountRejected(const std::string& reason) ABSL_LOCKS_EXCLUDED(mu) {
    absl::MutexLock l(&mu);
    ++rejected[reason];
  }

  // The slowest active worker's clock (SSP).
  uint64_t MinActiveClock() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    uint64_t m = UINT64_MAX;
    for (uint32_t r = 0; r < num_workers; ++r) {
      if (active[r]) m = std::min(m, clock[r]);
    }
    return m == UINT64_MAX ? 0 : m;
  }

  // Moves the SSP waits that the current clocks satisfy to `ready`.
  void ReleaseClockWaiters(std::vector<WaiterPtr>* ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const uint64_t slowest = MinActiveClock();
    auto keep = clock_waiters.begin();
    for (WaiterPtr& w : clock_waiters) {
      if (w->claimed.load(std::memory_order_acquire)) continue;
      if (w->need_clock <= slowest) {
        if (w->pending.fetch_sub(1) == 1) ready->push_back(std::move(w));
        continue;
      }
      *keep++ = std::move(w);
    }
    clock_waiters.erase(keep, clock_waiters.end());
  }

  // Advances `c` one version and moves the waits it satisfies to `ready`.
  static void AdvanceVersion(Chunk& c, std::vector<WaiterPtr>* ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
    const uint64_t v = ++c.state.version;
    c.version.store(v, std::memory_order_release);
    auto keep = c.waiters.begin();
    for (WaiterPtr& w : c.waiters) {
      if (w->claimed.load(std::memory_order_acquire)) continue;
      if (w->need_version <= v) {
        if (w->pending.fetch_sub(1) == 1) ready->push_back(std::move(w));
        continue;
      }
      *keep++ = std::move(w);
    }
    c.waiters.erase(keep, c.waiters.end());
  }

  // BSP: applies the step being aggregated on `c` once the quorum arrived.
  // True when it did.
  bool ApplyStepIfReady(Chunk& c, std::vector<WaiterPtr>* ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
    ChunkState& s = c.state;
    uint32_t members = 0, arrived = 0;
    for (uint32_t r = 0; r < num_workers; ++r) {
      if (!c.active[r]) continue;
      ++members;
      arrived += s.pushed[r];
    }
    const uint32_t quorum =
        members > backup_workers ? members - backup_workers : 1;
    if (arrived == 0 || arrived < quorum) return false;
    const uint64_t t0 = NowNanos();
    // Rank order, into the lowest rank's buffer: the same bits whatever the
    // order the pushes came in.
    float* sum = nullptr;
    for (uint32_t r = 0; r < num_workers; ++r) {
      if (!c.active[r] || !s.pushed[r]) continue;
      if (sum == nullptr) {
        sum = AsFloats(s.gradients[r]).data();
      } else {
        AddInto(absl::MakeSpan(sum, c.length), AsFloats(s.gradients[r]).data());
      }
    }
    optimizer->Apply(absl::MakeSpan(s.values), sum,
                     1.0f / static_cast<float>(arrived), &s.optimizer);
    std::fill(s.pushed.begin(), s.pushed.end(), 0);
    apply_ns.Record(NowNanos() - t0);
    applies.fetch_add(1, std::memory_order_relaxed);
    AdvanceVersion(c, ready);
    return true;
  }

  Chunk* LocalChunk(uint32_t chunk_id) const {
    if (chunk_id >= local.size() || local[chunk_id] < 0) return nullptr;
    return chunks[local[chunk_id]].get();
  }
};

Shard::Shard(ShardOptions options)
    : options_(std::move(options)), start_time_(absl::Now()) {}

Shard::~Shard() { Shutdown(); }

void Shard::CountRejected(const std::string& reason) const {
  absl::MutexLock l(&rejected_mu_);
  ++rejected_[reason];
}

absl::StatusOr<std::shared_ptr<Shard::Job>> Shard::FindJob(
    const std::string& job_id) const {
  absl::ReaderMutexLock l(&mu_);
  if (shutdown_) {
    CountRejected(kShutdown);
    return absl::UnavailableError(
        absl::StrCat("shard ", options_.shard_id, " is shutting down"));
  }
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    CountRejected(kUnknownJob);
    return absl::FailedPreconditionError(
        absl::StrCat("job_id: no job \"", job_id, "\" on shard ",
                     options_.shard_id, " (never registered, or dropped)"));
  }
  return it->second;
}

// ---------------------------------------------------------------------------
// Registration.

absl::StatusOr<std::shared_ptr<Shard::Job>> Shard::NewJob(
    const RegisterJobRequest& req, int* local_count) const {
  auto bad = [&](absl::Status st) {
    CountRejected(kBadSpec);
    return st;
  };
  auto invalid = [&](absl::string_view field, absl::string_view why) {
    return bad(absl::InvalidArgumentError(absl::StrCat(field, ": ", why)));
  };
  const JobSpec& spec = req.spec();
  if (req.job_id().empty()) return invalid("job_id", "must not be empty");
  uint32_t num_workers = req.num_workers();
  if (num_workers == 0) num_workers = spec.num_workers();
  if (req.num_workers() != 0 && spec.num_workers() != 0 &&
      req.num_workers() != spec.num_workers()) {
    return invalid(
        "num_workers",
        absl::StrCat(req.num_workers(), " differs from spec.num_workers ",
                     spec.num_workers()));
  }
  if (num_workers == 0) return invalid("num_workers", "must be >= 1");

  auto job = std::make_shared<Job>();
  job->id = req.job_id();
  job->spec = spec;
  job->placement = req.placement();
  job->num_workers = num_workers;
  job->registration = req;
  job->registration.set_num_workers(num_workers);

  absl::StatusOr<std::unique_ptr<Optimizer>> opt =
      Optimizer::Create(spec.optimizer());
  if (!opt.ok()) return bad(Prefixed("spec.", opt.status()));
  job->optimizer = std::move(*opt);

  const ConsistencySpec& cs = spec.consistency();
  job->mode = cs.mode() == CONSISTENCY_UNSPECIFIED ? BSP : cs.mode();
  if (job->mode != BSP && job->mode != ASP && job->mode != SSP) {
    return invalid("spec.consistency.mode",
                   absl::StrCat("unknown mode ", static_cast<int>(cs.mode())));
  }
  if (cs.backup_workers() != 0 && job->mode != BSP) {
    return invalid("spec.consistency.backup_workers",
                   "only BSP uses backup workers");
  }
  if (cs.backup_workers() >= num_workers) {
    return invalid("spec.consistency.backup_workers",
                   absl::StrCat("must be < num_workers (", num_workers,
                                "), got ", cs.backup_workers()));
  }
  if (cs.staleness() != 0 && job->mode != SSP) {
    return invalid("spec.consistency.staleness",
                   "only SSP uses a staleness bound");
  }
  job->backup_workers = cs.backup_workers();
  job->staleness_bound = cs.staleness();
  job->deadline_ms = cs.step_deadline_ms() == 0 ? kDefaultStepDeadlineMs
                                                : cs.step_deadline_ms();

  if (absl::Status st = ValidateTensors(spec); !st.ok()) {
    return bad(Prefixed("spec.", st));
  }
  const Placement& placement = req.placement();
  if (placement.num_shards() <= options_.shard_id) {
    return invalid("placement.num_shards",
                   absl::StrCat(placement.num_shards(), ", but this is shard ",
                                options_.shard_id));
  }
  const std::vector<ChunkPlacement> want = CutIntoChunks(spec);
  if (static_cast<size_t>(placement.chunks_size()) != want.size()) {
    return invalid(
        "placement.chunks",
        absl::StrCat(placement.chunks_size(),
                     " chunks, but the spec's tensors cut into ", want.size()));
  }
  uint64_t bytes = 0;
  *local_count = 0;
  for (int i = 0; i < placement.chunks_size(); ++i) {
    const ChunkPlacement& c = placement.chunks(i);
    const ChunkPlacement& w = want[i];
    if (c.chunk_id() != w.chunk_id() || c.tensor() != w.tensor() ||
        c.index() != w.index() || c.offset() != w.offset() ||
        c.length() != w.length()) {
      return invalid(
          absl::StrCat("placement.chunks[", i, "]"),
          absl::StrFormat("is (id %d, %s[%d], offset %d, length %d), the spec "
                          "cuts (id %d, %s[%d], offset %d, length %d)",
                          c.chunk_id(), c.tensor(), c.index(), c.offset(),
                          c.length(), w.chunk_id(), w.tensor(), w.index(),
                          w.offset(), w.length()));
    }
    if (c.shard() >= placement.num_shards()) {
      return invalid(
          absl::StrCat("placement.chunks[", i, "].shard"),
          absl::StrCat(c.shard(), " >= num_shards ", placement.num_shards()));
    }
    if (c.shard() != options_.shard_id) continue;
    ++*local_count;
    // Parameters, their encoding shared by replies, optimizer state.
    bytes += 2 * c.length() * sizeof(float) +
             job->optimizer->StateBytes(c.length()) + sizeof(Chunk);
    // BSP keeps one gradient per worker until the quorum arrives.
    if (job->mode == BSP) bytes += uint64_t{num_workers} * c.length() * 4;
  }
  job->bytes = bytes;

  const CheckpointSpec& ck = spec.checkpoint();
  job->every_steps = ck.every_steps();
  job->every_seconds = ck.every_seconds();
  job->checkpointing =
      store_ != nullptr && (ck.every_steps() > 0 || ck.every_seconds() > 0);
  job->gate_replies =
      job->checkpointing && job->mode == BSP && ck.every_steps() == 1;
  return job;
}

void Shard::InitJobState(Job& job, const std::vector<uint8_t>& active) {
  job.workers = std::make_unique<WorkerCounters[]>(job.num_workers);
  job.is_active = std::make_unique<std::atomic<bool>[]>(job.num_workers);
  for (uint32_t r = 0; r < job.num_workers; ++r) {
    job.is_active[r].store(active[r] != 0);
  }
  absl::MutexLock l(&job.mu);
  job.active = active;
  job.clock.assign(job.num_workers, 0);
}

absl::Status Shard::SameRegistration(const Job& existing, const Job& job,
                                     RegisterJobResponse* resp) const {
  std::string diff;
  bool same;
  {
    google::protobuf::util::MessageDifferencer d;
    d.ReportDifferencesToString(&diff);
    same = d.Compare(existing.spec, job.spec);
    if (!same) diff = "spec: " + diff;
  }
  if (same) {
    google::protobuf::util::MessageDifferencer d;
    d.ReportDifferencesToString(&diff);
    same = d.Compare(existing.placement, job.placement);
    if (!same) diff = "placement: " + diff;
  }
  if (same && existing.num_workers != job.num_workers) {
    same = false;
    diff = absl::StrCat("num_workers: ", existing.num_workers, " -> ",
                        job.num_workers);
  }
  if (same) {
    resp->set_chunks_held(existing.chunks.size());
    resp->set_bytes_held(existing.bytes);
    return absl::OkStatus();
  }
  CountRejected(kSpecMismatch);
  std::string first = diff.substr(0, diff.find('\n'));
  return absl::FailedPreconditionError(
      absl::StrCat("job \"", job.id, "\" is already registered on shard ",
                   options_.shard_id, " with another spec (", first, ")"));
}

absl::Status Shard::OverBudget(const Job& job, int local_count) const {
  const uint64_t free =
      options_.memory_budget_bytes - bytes_held_ - bytes_reserved_;
  CountRejected(kOverBudget);
  return absl::ResourceExhaustedError(absl::StrCat(
      "job \"", job.id, "\" needs ", job.bytes, " bytes on shard ",
      options_.shard_id, " (", local_count,
      " chunks: parameters, their encoded reply, optimizer state",
      job.mode == BSP ? ", one gradient per worker" : "", ") but only ", free,
      " of the ", options_.memory_budget_bytes, "-byte budget are free"));
}

absl::Status Shard::RegisterJob(const RegisterJobRequest& req,
                                RegisterJobResponse* resp) {
  int local_count = 0;
  absl::StatusOr<std::shared_ptr<Job>> built = NewJob(req, &local_count);
  if (!built.ok()) return built.status();
  std::shared_ptr<Job> job = *std::move(built);
  const uint64_t bytes = job->bytes;
  {
    absl::MutexLock l(&mu_);
    if (shutdown_) {
      CountRejected(kShutdown);
      return absl::UnavailableError(
          absl::StrCat("shard ", options_.shard_id, " is shutting down"));
    }
    if (auto it = jobs_.find(req.job_id()); it != jobs_.end()) {
      return SameRegistration(*it->second, *job, resp);
    }
    if (bytes > options_.memory_budget_bytes - bytes_held_ - bytes_reserved_) {
      return OverBudget(*job, local_count);
    }
    bytes_reserved_ += bytes;
  }

  // Allocate and initialise without holding the map lock.
  const JobSpec& spec = req.spec();
  const Placement& placement = req.placement();
  absl::flat_hash_map<std::string, const TensorSpec*> tensors;
  for (const TensorSpec& t : spec.tensors()) tensors[t.name()] = &t;
  std::vector<uint8_t> all_active(job->num_workers, 1);
  job->local.assign(placement.chunks_size(), -1);
  absl::Status init_status;
  for (const ChunkPlacement& c : placement.chunks()) {
    if (c.shard() != options_.shard_id) continue;
    ChunkState s = NewChunkState(c, *job->optimizer, job->num_workers);
    init_status = InitValues(spec.seed(), *tensors[c.tensor()], c.offset(),
                             absl::MakeSpan(s.values));
    if (!init_status.ok()) break;
    job->local[c.chunk_id()] = static_cast<int32_t>(job->chunks.size());
    job->chunks.push_back(std::make_unique<Chunk>(std::move(s), all_active));
  }
  InitJobState(*job, all_active);
  const bool asks = spec.checkpoint().every_steps() > 0 ||
                    spec.checkpoint().every_seconds() > 0;
  if (asks && !job->checkpointing) {
    // The job runs without them; the log and the stats say so.
    spdlog::warn(
        "job {}: spec.checkpoint asks for checkpoints but shard {} has no "
        "checkpoint_dir; running without them",
        job->id, options_.shard_id);
    absl::MutexLock l(&job->mu);
    job->rejected[kNoCheckpointDir] = 1;
  }
  if (job->checkpointing) {
    absl::MutexLock l(&job->due_mu);
    job->ScheduleNext(0, 0, absl::Now());
  }

  {
    absl::MutexLock l(&mu_);
    bytes_reserved_ -= bytes;
    if (!init_status.ok()) {
      CountRejected(kBadSpec);
      return Prefixed("spec.", init_status);
    }
    if (shutdown_) {
      CountRejected(kShutdown);
      return absl::UnavailableError(
          absl::StrCat("shard ", options_.shard_id, " is shutting down"));
    }
    if (auto it = jobs_.find(req.job_id()); it != jobs_.end()) {
      // A concurrent registration won.
      return SameRegistration(*it->second, *job, resp);
    }
    if (bytes > options_.memory_budget_bytes - bytes_held_ - bytes_reserved_) {
      return OverBudget(*job, local_count);
    }
    bytes_held_ += bytes;
    jobs_[req.job_id()] = job;
  }
  // Durable before the coordinator hands the job to workers, so a shard
  // that dies before the first checkpoint still comes back with the job.
  if (job->checkpointing) (void)WriteCheckpoint(job);
  resp->set_chunks_held(job->chunks.size());
  resp->set_bytes_held(bytes);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Checkpoints.

absl::Status Shard::OpenCheckpoints(RestoreReport* report) {
  *report = RestoreReport();
  if (options_.checkpoint_dir.empty()) return absl::OkStatus();
  {
    absl::MutexLock l(&mu_);
    if (shutdown_) {
      return absl::UnavailableError(
          absl::StrCat("shard ", options_.shard_id, " is shutting down"));
    }
    if (!jobs_.empty()) {
      return absl::FailedPreconditionError(
          "OpenCheckpoints must run before any job is registered");
    }
  }
  if (store_ != nullptr) {
    return absl::FailedPreconditionError("checkpoints are already open");
  }
  absl::StatusOr<std::unique_ptr<CheckpointStore>> store =
      CheckpointStore::Open(options_.checkpoint_dir, options_.shard_id);
  if (!store.ok()) return store.status();
  absl::StatusOr<std::vector<std::string>> ids = (*store)->ListJobs();
  if (!ids.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint_dir: ", ids.status().message()));
  }
  store_ = *std::move(store);
  for (const std::string& id : *ids) {
    absl::StatusOr<CheckpointStore::Loaded> loaded = store_->LoadLatest(id);
    if (!loaded.ok()) {
      report->problems.push_back(std::string(loaded.status().message()));
      continue;
    }
    for (const absl::Status& s : loaded->rejected) {
      report->problems.push_back(absl::StrCat(
          s.message(), "; using the previous checkpoint ", loaded->path));
    }
    const uint64_t step = loaded->checkpoint.step;
    absl::Status st = RestoreJob(std::move(loaded->checkpoint));
    if (!st.ok()) {
      report->problems.push_back(
          absl::StrCat("checkpoint ", loaded->path, ": job \"", id,
                       "\" not restored: ", st.message()));
      continue;
    }
    report->restored.push_back(absl::StrCat("job \"", id, "\" at step ", step,
                                            " from ", loaded->path));
  }
  writer_ = std::thread([this] { WriterLoop(); });
  return absl::OkStatus();
}

absl::Status Shard::RestoreJob(JobCheckpoint ck) {
  int local_count = 0;
  absl::StatusOr<std::shared_ptr<Job>> built =
      NewJob(ck.registration, &local_count);
  if (!built.ok()) return built.status();
  std::shared_ptr<Job> job = *std::move(built);
  if (ck.chunks.size() != static_cast<size_t>(local_count) ||
      ck.active.size() != job->num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat(ck.chunks.size(), " chunks and ", ck.active.size(),
                     " workers, the registration gives ", local_count, " and ",
                     job->num_workers));
  }
  job->local.assign(job->placement.chunks_size(), -1);
  uint64_t min_version = UINT64_MAX;
  std::vector<uint64_t> steps(job->num_workers, 0);
  for (ChunkState& s : ck.chunks) {
    const uint32_t id = s.placement.chunk_id();
    if (id >= job->local.size() || job->local[id] >= 0 ||
        job->placement.chunks(id).shard() != options_.shard_id) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk ", id, " is not a chunk of this shard"));
    }
    min_version = std::min(min_version, s.version);
    for (uint32_t r = 0; r < job->num_workers; ++r) {
      steps[r] = std::max(steps[r], s.next_step[r]);
    }
    job->local[id] = static_cast<int32_t>(job->chunks.size());
    const uint64_t version = s.version;
    auto c = std::make_unique<Chunk>(std::move(s), ck.active);
    c->version.store(version);
    job->chunks.push_back(std::move(c));
  }
  if (min_version == UINT64_MAX) min_version = 0;
  InitJobState(*job, ck.active);
  if (job->mode != BSP) {
    // Each worker's applied steps: SSP's clock and the stats' step.
    absl::MutexLock l(&job->mu);
    for (uint32_t r = 0; r < job->num_workers; ++r) {
      job->clock[r] = steps[r];
      if (steps[r] > 0) {
        job->workers[r].pushed_any.store(true);
        job->workers[r].last_step.store(steps[r] - 1);
      }
    }
  }
  job->restored = true;
  job->restored_from_step = ck.step;
  {
    absl::MutexLock l(&job->mu);
    job->durable_version = min_version;
  }
  {
    absl::MutexLock l(&job->write_mu);
    job->sequence = ck.sequence;
  }
  if (job->checkpointing) {
    absl::MutexLock l(&job->due_mu);
    job->ScheduleNext(ck.step, 0, absl::Now());
  }
  absl::MutexLock l(&mu_);
  if (jobs_.contains(job->id)) {
    return absl::AlreadyExistsError("the job is already registered");
  }
  if (job->bytes >
      options_.memory_budget_bytes - bytes_held_ - bytes_reserved_) {
    return OverBudget(*job, local_count);
  }
  bytes_held_ += job->bytes;
  jobs_[job->id] = job;
  return absl::OkStatus();
}

absl::Status Shard::CheckpointNow(const std::string& job_id) {
  absl::StatusOr<std::shared_ptr<Job>> found = FindJob(job_id);
  if (!found.ok()) return found.status();
  if (!(*found)->checkpointing) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job \"", job_id, "\" has no checkpoints on shard ", options_.shard_id,
        store_ == nullptr ? " (no checkpoint_dir)"
                          : " (spec.checkpoint asks for none)"));
  }
  return WriteCheckpoint(*found);
}

void Shard::CheckCheckpoints(absl::Time now) {
  if (store_ == nullptr) return;
  std::vector<std::shared_ptr<Job>> jobs;
  {
    absl::ReaderMutexLock l(&mu_);
    for (const auto& [id, job] : jobs_) {
      if (job->checkpointing && job->every_seconds > 0) jobs.push_back(job);
    }
  }
  for (const std::shared_ptr<Job>& job : jobs)
    MaybeQueueCheckpoint(job, {}, now);
}

void Shard::MaybeQueueCheckpoint(const std::shared_ptr<Job>& job,
                                 absl::Span<Chunk* const> advanced,
                                 absl::Time now, bool recheck) {
  if (!job->checkpointing) return;
  if (now == absl::InfinitePast() && job->every_seconds > 0) now = absl::Now();
  if (!recheck && advanced.empty()) {
    // Most pushes (BSP: those that complete no step here): nothing due,
    // decided without a lock. A BSP step count only moves with `advanced`.
    const bool steps_due =
        job->mode != BSP && job->every_steps > 0 &&
        job->SlowestWorkerSteps() >=
            job->next_due_step_hint.load(std::memory_order_relaxed);
    const bool time_due =
        job->every_seconds > 0 &&
        absl::ToUnixNanos(now) >=
            job->next_due_time_ns.load(std::memory_order_relaxed);
    if (!steps_due && !time_due) return;
  }
  {
    absl::MutexLock l(&job->due_mu);
    if (job->mode == BSP) {
      for (Chunk* c : advanced) job->NoteVersion(*c);
    }
    if (job->queued || !job->Due(now)) return;
    job->queued = true;
  }
  absl::MutexLock l(&writer_mu_);
  // After Shutdown stopped the writer, its final pass covers the job.
  if (!writer_stop_) writer_queue_.push_back(job);
}

void Shard::WriterLoop() {
  while (true) {
    std::shared_ptr<Job> job;
    {
      absl::MutexLock l(&writer_mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(writer_mu_) {
        return writer_stop_ || !writer_queue_.empty();
      };
      writer_mu_.Await(absl::Condition(&ready));
      if (writer_queue_.empty()) return;  // stopping, nothing left
      job = std::move(writer_queue_.front());
      writer_queue_.pop_front();
      writer_busy_ = true;
    }
    (void)WriteCheckpoint(job);
    absl::MutexLock l(&writer_mu_);
    writer_busy_ = false;
  }
}

void Shard::FlushCheckpoints() {
  absl::MutexLock l(&writer_mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(writer_mu_) {
    return writer_queue_.empty() && !writer_busy_;
  };
  writer_mu_.Await(absl::Condition(&idle));
}

absl::Status Shard::WriteCheckpoint(const std::shared_ptr<Job>& job) {
  Job& j = *job;
  absl::Status status;
  uint64_t min_version = UINT64_MAX;
  {
    absl::MutexLock w(&j.write_mu);
    if (j.removed) {
      absl::MutexLock l(&j.due_mu);
      j.queued = false;
      return absl::FailedPreconditionError(
          absl::StrCat("job \"", j.id, "\" was dropped"));
    }
    const uint64_t pushes_before = j.pushes.load(std::memory_order_relaxed);
    uint64_t step = 0;
    uint64_t sequence = 0;
    std::string bytes;
    {
      // The membership and every chunk as one state: each chunk is copied
      // under its own lock alone, so pushes to other chunks go on.
      absl::MutexLock m(&j.membership_update_mu);
      std::vector<uint8_t> active;
      {
        absl::MutexLock l(&j.mu);
        active = j.active;
      }
      CheckpointEncoder enc(options_.shard_id, j.registration, active,
                            *j.optimizer);
      std::vector<uint64_t> steps(j.num_workers, 0);
      for (const std::unique_ptr<Chunk>& c : j.chunks) {
        absl::MutexLock l(&c->mu);
        enc.AddChunk(c->state);
        min_version = std::min(min_version, c->state.version);
        for (uint32_t r = 0; r < j.num_workers; ++r) {
          steps[r] = std::max(steps[r], c->state.next_step[r]);
        }
      }
      if (min_version == UINT64_MAX) min_version = 0;
      if (j.mode == BSP) {
        step = min_version;
      } else {
        uint64_t slowest = UINT64_MAX;
        for (uint32_t r = 0; r < j.num_workers; ++r) {
          if (active[r]) slowest = std::min(slowest, steps[r]);
        }
        step = slowest == UINT64_MAX ? 0 : slowest;
      }
      sequence = ++j.sequence;
      bytes = std::move(enc).Finish(sequence, step);
    }
    {
      absl::MutexLock l(&j.due_mu);
      j.queued = false;
      j.ScheduleNext(step, pushes_before, absl::Now());
    }
    absl::StatusOr<std::string> path = store_->Write(j.id, sequence, bytes);
    if (path.ok()) {
      j.checkpoints.fetch_add(1, std::memory_order_relaxed);
      spdlog::debug("job {}: checkpoint of step {} written to {}", j.id, step,
                    *path);
    } else {
      status = path.status();
      j.CountRejected(kCheckpointFailed);
      spdlog::error("job {}: checkpoint of step {} on shard {} failed: {}",
                    j.id, step, options_.shard_id,
                    std::string(status.message()));
    }
  }
  if (j.gate_replies) {
    // A failed write releases the answers too: training goes on without
    // this checkpoint (logged and counted), and a later restore falls back
    // to an older one, which then refuses the lost steps loudly.
    std::vector<WaiterPtr> ready;
    {
      absl::MutexLock l(&j.mu);
      j.durable_version = std::max(j.durable_version, min_version);
      j.ReleaseDurableWaiters(&ready);
    }
    CompleteAll(&ready);
  }
  // Due again already (the chunks moved on while this one was copied, and
  // their triggers found it queued)?
  MaybeQueueCheckpoint(job, {}, absl::InfinitePast(), /*recheck=*/true);
  return status;
}

absl::Status Shard::DropJob(const DropJobRequest& req) {
  std::shared_ptr<Job> job;
  {
    absl::MutexLock l(&mu_);
    auto it = jobs_.find(req.job_id());
    if (it == jobs_.end()) return absl::OkStatus();
    job = std::move(it->second);
    jobs_.erase(it);
    bytes_held_ -= job->bytes;
  }
  CloseJob(*job, absl::AbortedError(absl::StrCat(
                     "job \"", job->id, "\" was dropped from shard ",
                     options_.shard_id, " while this call waited")));
  if (job->checkpointing) {
    // A dropped job must not come back with the next restart.
    absl::MutexLock w(&job->write_mu);
    job->removed = true;
    if (absl::Status st = store_->Remove(job->id); !st.ok()) {
      spdlog::error("job {}: dropped, but its checkpoints remain: {}", job->id,
                    std::string(st.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status Shard::SetMembership(const SetMembershipRequest& req) {
  absl::StatusOr<std::shared_ptr<Job>> found = FindJob(req.job_id());
  if (!found.ok()) return found.status();
  Job& job = **found;
  auto bad = [&](absl::string_view field, absl::string_view why) {
    job.CountRejected(kBadMembership);
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
  };
  if (req.active_workers().empty()) {
    return bad("active_workers", "must name at least one worker");
  }
  std::vector<uint8_t> active(job.num_workers, 0);
  for (int i = 0; i < req.active_workers_size(); ++i) {
    const uint32_t r = req.active_workers(i);
    const std::string field = absl::StrCat("active_workers[", i, "]");
    if (r >= job.num_workers) {
      return bad(field, absl::StrCat("rank ", r, " out of range [0, ",
                                     job.num_workers, ")"));
    }
    if (active[r]) return bad(field, absl::StrCat("rank ", r, " listed twice"));
    active[r] = 1;
  }
  std::vector<WaiterPtr> ready;
  std::vector<Chunk*> advanced;
  {
    absl::MutexLock serial(&job.membership_update_mu);
    {
      absl::MutexLock l(&job.mu);
      job.active = active;
      for (uint32_t r = 0; r < job.num_workers; ++r) {
        job.is_active[r].store(active[r] != 0, std::memory_order_release);
      }
      if (job.mode == SSP) job.ReleaseClockWaiters(&ready);
    }
    for (const std::unique_ptr<Chunk>& c : job.chunks) {
      absl::MutexLock l(&c->mu);
      c->active = active;
      if (job.mode == BSP && job.ApplyStepIfReady(*c, &ready)) {
        advanced.push_back(c.get());
      }
    }
  }
  CompleteAll(&ready);
  MaybeQueueCheckpoint(*found, advanced, absl::InfinitePast());
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Pushes.

absl::Status Shard::ValidatePush(Job& job, uint32_t worker, uint64_t step,
                                 const ChunkDataList& gradients,
                                 std::vector<Chunk*>* chunks) const {
  auto reject = [&](const char* reason, absl::Status st) {
    job.CountRejected(reason);
    return st;
  };
  if (worker >= job.num_workers) {
    return reject(kWorkerOutOfRange,
                  absl::InvalidArgumentError(absl::StrCat(
                      "worker: rank ", worker, " out of range [0, ",
                      job.num_workers, ") of job \"", job.id, "\"")));
  }
  if (!job.is_active[worker].load(std::memory_order_acquire)) {
    return reject(kInactiveWorker,
                  absl::FailedPreconditionError(absl::StrCat(
                      "worker: rank ", worker,
                      " is not an active member of job \"", job.id, "\"")));
  }
  chunks->clear();
  chunks->reserve(gradients.size());
  absl::flat_hash_map<uint32_t, int> seen;
  for (int i = 0; i < gradients.size(); ++i) {
    const ChunkData& g = gradients[i];
    const std::string field = absl::StrCat("gradients[", i, "]");
    const uint32_t id = g.chunk_id();
    if (id >= static_cast<uint32_t>(job.placement.chunks_size())) {
      return reject(
          kUnknownChunk,
          absl::InvalidArgumentError(absl::StrCat(
              field, ".chunk_id: ", id, " out of range, job \"", job.id,
              "\" has ", job.placement.chunks_size(), " chunks")));
    }
    Chunk* c = job.LocalChunk(id);
    if (c == nullptr) {
      const ChunkPlacement& p = job.placement.chunks(id);
      return reject(kChunkNotOnShard,
                    absl::InvalidArgumentError(absl::StrCat(
                        field, ".chunk_id: ", ChunkName(p), " is on shard ",
                        p.shard(), ", not shard ", options_.shard_id)));
    }
    if (auto [it, inserted] = seen.emplace(id, i); !inserted) {
      return reject(kDuplicateChunk,
                    absl::InvalidArgumentError(
                        absl::StrCat(field, ".chunk_id: chunk ", id,
                                     " also in gradients[", it->second, "]")));
    }
    if (g.data().size() != c->length * sizeof(float)) {
      return reject(kWrongSize, absl::InvalidArgumentError(absl::StrCat(
                                    field, ".data: ", g.data().size(),
                                    " bytes, ", ChunkName(c->placement),
                                    " holds ", c->length, " floats")));
    }
    const uint64_t version = c->version.load(std::memory_order_acquire);
    if (job.restored && job.mode == BSP &&
        (step > version || g.version() > version)) {
      // The worker saw parameters this shard lost when it restarted.
      return reject(
          kAheadOfRestore,
          absl::FailedPreconditionError(absl::StrCat(
              "step: ", step, " (gradient of version ", g.version(),
              ") is ahead of ", ChunkName(c->placement), " at version ",
              version, ": shard ", options_.shard_id,
              " restarted and restored job \"", job.id,
              "\" from its checkpoint of step ", job.restored_from_step,
              "; the updates after it are lost (checkpoint { every_steps: 1 } "
              "makes a restore exact)")));
    }
    // ASP/SSP after a restore: updates after the checkpoint are lost, so a
    // gradient may be of a version the chunk no longer reached.
    if (g.version() > version && !job.restored) {
      return reject(kVersionAhead,
                    absl::InvalidArgumentError(absl::StrCat(
                        field, ".version: ", g.version(), " is ahead of ",
                        ChunkName(c->placement), " at version ", version)));
    }
    if (job.mode == BSP && step > version) {
      return reject(kFutureStep,
                    absl::InvalidArgumentError(absl::StrCat(
                        "step: ", step, " is ahead of ",
                        ChunkName(c->placement), " at version ", version,
                        " (BSP accepts step t once version t was pulled)")));
    }
    chunks->push_back(c);
  }
  // The one full read of the payloads, last: every cheap check passed.
  for (int i = 0; i < gradients.size(); ++i) {
    const std::string& data = gradients[i].data();
    const int64_t at = FirstNonFinite(data);
    if (at < 0) continue;
    float x;
    DecodeFloats(absl::string_view(data.data() + 4 * at, 4),
                 absl::MakeSpan(&x, 1));
    return reject(kNonFinite, absl::InvalidArgumentError(absl::StrCat(
                                  "gradients[", i, "].data: element ", at,
                                  " is ", std::isnan(x) ? "NaN" : "Inf", " (",
                                  ChunkName(chunks->at(i)->placement), ")")));
  }
  return absl::OkStatus();
}

Shard::PushCounts Shard::ApplyPush(Job& job, uint32_t worker, uint64_t step,
                                   const ChunkDataList& gradients,
                                   ChunkDataList* take,
                                   const std::vector<Chunk*>& chunks,
                                   std::vector<WaiterPtr>* ready,
                                   std::vector<Chunk*>* advanced) {
  // ASP/SSP on big-endian hosts decode here, reused by every push on this
  // thread.
  static thread_local std::vector<float> scratch;
  PushCounts counts;
  uint64_t accepted = 0, bytes = 0, max_staleness = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    Chunk& c = *chunks[i];
    const ChunkData& g = gradients[static_cast<int>(i)];
    bytes += g.data().size();
    absl::MutexLock l(&c.mu);
    ChunkState& s = c.state;
    if (job.mode == BSP) {
      // Validation saw step <= version, and versions only grow.
      max_staleness = std::max(max_staleness, s.version - step);
      if (step < s.version) {
        ++counts.stale;
      } else if (s.pushed[worker]) {
        ++counts.duplicates;
      } else {
        std::string& buf = s.gradients[worker];
        if (take != nullptr) {
          // The request's buffer becomes this step's gradient, and the
          // previous step's buffer goes back to the request for reuse.
          buf.swap(*take->Mutable(static_cast<int>(i))->mutable_data());
        } else {
          buf.assign(g.data());
        }
        ToNativeFloats(&buf);
        s.pushed[worker] = 1;
        ++accepted;
        if (job.ApplyStepIfReady(c, ready)) advanced->push_back(&c);
      }
      continue;
    }
    if (step < s.next_step[worker]) {
      ++counts.duplicates;
      continue;
    }
    s.next_step[worker] = step + 1;
    // Only a restored job sees a gradient ahead of the chunk.
    const uint64_t staleness =
        s.version >= g.version() ? s.version - g.version() : 0;
    max_staleness = std::max(max_staleness, staleness);
    job.staleness.Record(staleness);
    // Straight from the request's bytes (a copy only on big-endian hosts).
    const float* grad = NativeFloats(g.data(), &scratch);
    const uint64_t t0 = NowNanos();
    job.optimizer->Apply(absl::MakeSpan(s.values), grad, 1.0f, &s.optimizer);
    job.apply_ns.Record(NowNanos() - t0);
    job.applies.fetch_add(1, std::memory_order_relaxed);
    ++accepted;
    Job::AdvanceVersion(c, ready);
    advanced->push_back(&c);
  }
  job.pushes.fetch_add(accepted, std::memory_order_relaxed);
  job.duplicates.fetch_add(counts.duplicates, std::memory_order_relaxed);
  job.stale.fetch_add(counts.stale, std::memory_order_relaxed);
  job.bytes_in.fetch_add(bytes, std::memory_order_relaxed);
  WorkerCounters& wc = job.workers[worker];
  StoreMax(wc.last_step, step);
  wc.pushed_any.store(true, std::memory_order_relaxed);
  wc.pushes.fetch_add(accepted, std::memory_order_relaxed);
  wc.staleness.store(max_staleness, std::memory_order_relaxed);
  if (job.mode == SSP) {
    absl::MutexLock l(&job.mu);
    job.clock[worker] = std::max(job.clock[worker], step + 1);
    job.ReleaseClockWaiters(ready);
  }
  return counts;
}

absl::Status Shard::Push(const PushRequest& req, PushResponse* resp) {
  resp->Clear();
  absl::StatusOr<std::shared_ptr<Job>> job = FindJob(req.job_id());
  if (!job.ok()) return job.status();
  std::vector<Chunk*> chunks;
  if (absl::Status st = ValidatePush(**job, req.worker(), req.step(),
                                     req.gradients(), &chunks);
      !st.ok()) {
    return st;
  }
  std::vector<WaiterPtr> ready;
  std::vector<Chunk*> advanced;
  const PushCounts counts =
      ApplyPush(**job, req.worker(), req.step(), req.gradients(), nullptr,
                chunks, &ready, &advanced);
  resp->set_duplicates(counts.duplicates);
  resp->set_stale(counts.stale);
  CompleteAll(&ready);
  MaybeQueueCheckpoint(*job, advanced, absl::InfinitePast());
  return absl::OkStatus();
}

void Shard::PushPull(const PushPullRequest& req, PushPullResponse* resp,
                     std::function<void(absl::Status)> done,
                     std::vector<SharedBytes>* payloads) {
  PushPull(req, nullptr, resp, std::move(done), payloads);
}

void Shard::PushPull(PushPullRequest* req, PushPullResponse* resp,
                     std::function<void(absl::Status)> done,
                     std::vector<SharedBytes>* payloads) {
  PushPull(*req, req->mutable_gradients(), resp, std::move(done), payloads);
}

void Shard::PushPull(const PushPullRequest& req, ChunkDataList* take,
                     PushPullResponse* resp,
                     std::function<void(absl::Status)> done,
                     std::vector<SharedBytes>* payloads) {
  resp->Clear();
  if (payloads != nullptr) payloads->clear();
  absl::StatusOr<std::shared_ptr<Job>> found = FindJob(req.job_id());
  if (!found.ok()) {
    done(found.status());
    return;
  }
  const std::shared_ptr<Job>& job = *found;
  std::vector<Chunk*> chunks;
  if (absl::Status st = ValidatePush(*job, req.worker(), req.step(),
                                     req.gradients(), &chunks);
      !st.ok()) {
    done(st);
    return;
  }
  std::vector<WaiterPtr> ready;
  std::vector<Chunk*> advanced;
  const PushCounts counts =
      ApplyPush(*job, req.worker(), req.step(), req.gradients(), take, chunks,
                &ready, &advanced);
  // Written before the wait exists: afterwards only its claimer touches resp.
  resp->set_duplicates(counts.duplicates);
  resp->set_stale(counts.stale);
  CompleteAll(&ready);
  MaybeQueueCheckpoint(job, advanced, absl::InfinitePast());

  WaiterPtr w =
      NewWaiter(job, std::move(chunks), req.step(), resp->mutable_parameters(),
                payloads, std::move(done));
  if (job->mode == BSP) w->need_version = req.step() + 1;
  if (job->mode == SSP && req.step() + 1 > job->staleness_bound) {
    w->need_clock = req.step() + 1 - job->staleness_bound;
  }
  StartWait(job, std::move(w));
}

// ---------------------------------------------------------------------------
// Pulls and waits.

void Shard::Pull(const PullRequest& req, PullResponse* resp,
                 std::function<void(absl::Status)> done,
                 std::vector<SharedBytes>* payloads) {
  resp->Clear();
  if (payloads != nullptr) payloads->clear();
  absl::StatusOr<std::shared_ptr<Job>> found = FindJob(req.job_id());
  if (!found.ok()) {
    done(found.status());
    return;
  }
  const std::shared_ptr<Job>& job = *found;
  auto reject = [&](const char* reason, absl::Status st) {
    job->CountRejected(reason);
    done(std::move(st));
  };
  if (req.worker() >= job->num_workers) {
    reject(kWorkerOutOfRange,
           absl::InvalidArgumentError(
               absl::StrCat("worker: rank ", req.worker(), " out of range [0, ",
                            job->num_workers, ") of job \"", job->id, "\"")));
    return;
  }
  std::vector<Chunk*> chunks;
  if (req.chunk_ids().empty()) {
    for (const std::unique_ptr<Chunk>& c : job->chunks)
      chunks.push_back(c.get());
  }
  absl::flat_hash_map<uint32_t, int> seen;
  for (int i = 0; i < req.chunk_ids_size(); ++i) {
    const uint32_t id = req.chunk_ids(i);
    const std::string field = absl::StrCat("chunk_ids[", i, "]");
    if (id >= static_cast<uint32_t>(job->placement.chunks_size())) {
      reject(kUnknownChunk,
             absl::InvalidArgumentError(absl::StrCat(
                 field, ": ", id, " out of range, job \"", job->id, "\" has ",
                 job->placement.chunks_size(), " chunks")));
      return;
    }
    Chunk* c = job->LocalChunk(id);
    if (c == nullptr) {
      const ChunkPlacement& p = job->placement.chunks(id);
      reject(kChunkNotOnShard,
             absl::InvalidArgumentError(
                 absl::StrCat(field, ": ", ChunkName(p), " is on shard ",
                              p.shard(), ", not shard ", options_.shard_id)));
      return;
    }
    if (auto [it, inserted] = seen.emplace(id, i); !inserted) {
      reject(kDuplicateChunk, absl::InvalidArgumentError(absl::StrCat(
                                  field, ": chunk ", id, " also in chunk_ids[",
                                  it->second, "]")));
      return;
    }
    chunks.push_back(c);
  }
  if (job->restored && job->mode == BSP) {
    // min_version is a version the worker saw; past the next one, this
    // shard lost it when it restarted and will never reach it.
    for (Chunk* c : chunks) {
      const uint64_t version = c->version.load(std::memory_order_acquire);
      if (req.min_version() > version + 1) {
        reject(kAheadOfRestore,
               absl::FailedPreconditionError(absl::StrCat(
                   "min_version: ", req.min_version(), " is ahead of ",
                   ChunkName(c->placement), " at version ", version, ": shard ",
                   options_.shard_id, " restarted and restored job \"", job->id,
                   "\" from its checkpoint of step ", job->restored_from_step,
                   "; the updates after it are lost")));
        return;
      }
    }
  }
  WaiterPtr w =
      NewWaiter(job, std::move(chunks), req.step(), resp->mutable_parameters(),
                payloads, std::move(done));
  w->need_version = req.min_version();
  if (job->mode == SSP && req.step() > job->staleness_bound) {
    w->need_clock = req.step() - job->staleness_bound;
  }
  StartWait(job, std::move(w));
}

Shard::WaiterPtr Shard::NewWaiter(const std::shared_ptr<Job>& job,
                                  std::vector<Chunk*> chunks, uint64_t step,
                                  ChunkDataList* out,
                                  std::vector<SharedBytes>* payloads,
                                  std::function<void(absl::Status)> done) {
  auto w = std::make_shared<Waiter>();
  w->id = next_waiter_id_.fetch_add(1, std::memory_order_relaxed);
  w->chunks = std::move(chunks);
  w->step = step;
  w->deadline = absl::Now() + absl::Milliseconds(job->deadline_ms);
  w->out = out;
  w->payloads = payloads;
  w->job = job;
  w->done = std::move(done);
  return w;
}

void Shard::StartWait(const std::shared_ptr<Job>& job, WaiterPtr w) {
  // Nothing to wait for (ASP PushPull, most Pulls): answer without touching
  // the job mutex, unless the job is closing.
  if (w->need_version == 0 && w->need_clock == 0 &&
      !job->is_closed.load(std::memory_order_acquire)) {
    w->registered = false;
    Complete(w);
    return;
  }
  absl::Status closed;
  {
    absl::MutexLock l(&job->mu);
    closed = job->closed;
    if (closed.ok()) job->live.emplace(w->id, w);
  }
  if (!closed.ok()) {
    Fail(w, closed);
    return;
  }
  if (w->need_version > 0) {
    for (Chunk* c : w->chunks) {
      absl::MutexLock l(&c->mu);
      if (c->state.version < w->need_version) {
        w->pending.fetch_add(1);
        c->waiters.push_back(w);
      }
    }
  }
  if (w->need_clock > 0) {
    absl::MutexLock l(&job->mu);
    if (job->MinActiveClock() < w->need_clock) {
      w->pending.fetch_add(1);
      job->clock_waiters.push_back(w);
    }
  }
  if (w->need_version > 0 && job->gate_replies) {
    absl::MutexLock l(&job->mu);
    if (job->durable_version < w->need_version) {
      w->pending.fetch_add(1);
      job->durable_waiters.push_back(w);
    }
  }
  if (w->pending.fetch_sub(1) == 1) Complete(w);
}

void Shard::Complete(const WaiterPtr& w) {
  if (w->claimed.exchange(true, std::memory_order_acq_rel)) return;
  std::shared_ptr<Job> job = std::move(w->job);
  if (w->registered) {
    absl::MutexLock l(&job->mu);
    job->live.erase(w->id);
  }
  w->out->Clear();
  w->out->Reserve(static_cast<int>(w->chunks.size()));
  uint64_t bytes = 0;
  for (Chunk* c : w->chunks) {
    ChunkData* d = w->out->Add();
    absl::MutexLock l(&c->mu);
    d->set_chunk_id(c->placement.chunk_id());
    d->set_version(c->state.version);
    if (w->payloads == nullptr) {
      EncodeFloats(c->state.values, d->mutable_data());
      bytes += d->data().size();
      continue;
    }
    // Encoded once per version: the other replies of it share the bytes.
    if (c->encoded == nullptr || c->encoded_version != c->state.version) {
      // use_count() only falls behind our back (replies being released), so
      // 1 means no reply holds the buffer and it may be rewritten.
      if (c->encoded == nullptr || c->encoded.use_count() > 1) {
        c->encoded = std::make_shared<std::string>();
      }
      EncodeFloats(c->state.values, c->encoded.get());
      c->encoded_version = c->state.version;
    }
    w->payloads->push_back(c->encoded);
    bytes += c->encoded->size();
  }
  job->pulls.fetch_add(w->chunks.size(), std::memory_order_relaxed);
  job->bytes_out.fetch_add(bytes, std::memory_order_relaxed);
  std::function<void(absl::Status)> done = std::move(w->done);
  w->done = nullptr;
  done(absl::OkStatus());
}

void Shard::Fail(const WaiterPtr& w, const absl::Status& status) {
  if (w->claimed.exchange(true, std::memory_order_acq_rel)) return;
  std::shared_ptr<Job> job = std::move(w->job);
  if (job != nullptr) {
    absl::MutexLock l(&job->mu);
    job->live.erase(w->id);
  }
  std::function<void(absl::Status)> done = std::move(w->done);
  w->done = nullptr;
  done(status);
}

void Shard::CompleteAll(std::vector<WaiterPtr>* ready) {
  for (const WaiterPtr& w : *ready) Complete(w);
  ready->clear();
}

void Shard::CloseJob(Job& job, const absl::Status& status) {
  std::vector<WaiterPtr> waiters;
  {
    absl::MutexLock l(&job.mu);
    if (job.closed.ok()) job.closed = status;
    job.is_closed.store(true, std::memory_order_release);
    for (auto& [id, w] : job.live) waiters.push_back(w);
    job.live.clear();
    job.clock_waiters.clear();
    job.durable_waiters.clear();
  }
  for (const std::unique_ptr<Chunk>& c : job.chunks) {
    absl::MutexLock l(&c->mu);
    c->waiters.clear();
  }
  for (const WaiterPtr& w : waiters) Fail(w, status);
}

void Shard::CheckDeadlines(absl::Time now) {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    absl::ReaderMutexLock l(&mu_);
    for (const auto& [id, job] : jobs_) jobs.push_back(job);
  }
  for (const std::shared_ptr<Job>& job : jobs) {
    struct Expired {
      WaiterPtr w;
      std::vector<uint32_t> clock_missing;  // SSP: workers holding it back
    };
    std::vector<Expired> expired;
    {
      absl::MutexLock l(&job->mu);
      for (auto it = job->live.begin(); it != job->live.end();) {
        const WaiterPtr& w = it->second;
        if (w->deadline > now) {
          ++it;
          continue;
        }
        Expired e{w, {}};
        if (w->need_clock > 0 && job->MinActiveClock() < w->need_clock) {
          for (uint32_t r = 0; r < job->num_workers; ++r) {
            if (job->active[r] && job->clock[r] < w->need_clock) {
              e.clock_missing.push_back(r);
            }
          }
        }
        expired.push_back(std::move(e));
        job->live.erase(it++);
      }
    }
    for (Expired& e : expired) {
      const Waiter& w = *e.w;
      if (w.claimed.load(std::memory_order_acquire)) continue;
      // BSP: the lowest unfinished step among the wait's chunks, and every
      // active worker whose gradient for it has not arrived.
      uint64_t step = UINT64_MAX;
      std::vector<uint8_t> missing(job->num_workers, 0);
      for (Chunk* c : w.chunks) {
        absl::MutexLock l(&c->mu);
        if (c->state.version >= w.need_version) continue;
        step = std::min(step, c->state.version);
        for (uint32_t r = 0; r < job->num_workers; ++r) {
          if (c->active[r] && !c->state.pushed[r]) missing[r] = 1;
        }
      }
      std::vector<uint32_t> ranks;
      if (step == UINT64_MAX && e.clock_missing.empty() && job->gate_replies &&
          w.need_version > 0) {
        Fail(e.w, absl::DeadlineExceededError(absl::StrCat(
                      "job ", job->id, " step ", w.need_version - 1,
                      ": the checkpoint of version ", w.need_version,
                      " was not written within ", job->deadline_ms, " ms")));
        continue;
      }
      if (step != UINT64_MAX) {
        for (uint32_t r = 0; r < job->num_workers; ++r) {
          if (missing[r]) ranks.push_back(r);
        }
      } else {
        ranks = e.clock_missing;
        step = w.need_clock > 0 ? w.need_clock - 1 : w.step;
      }
      std::string what = ranks.empty()
                             ? "not complete"
                             : absl::StrCat("no gradient from worker",
                                            ranks.size() == 1 ? " " : "s ",
                                            absl::StrJoin(ranks, ", "));
      std::string ssp =
          e.clock_missing.empty() || w.need_clock == 0
              ? ""
              : absl::StrCat(" (SSP staleness ", job->staleness_bound,
                             ": step ", w.step, " waits for the slowest)");
      Fail(e.w, absl::DeadlineExceededError(
                    absl::StrCat("job ", job->id, " step ", step, ": ", what,
                                 " after ", job->deadline_ms, " ms", ssp)));
    }
  }
}

size_t Shard::PendingWaits() const {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    absl::ReaderMutexLock l(&mu_);
    for (const auto& [id, job] : jobs_) jobs.push_back(job);
  }
  size_t n = 0;
  for (const std::shared_ptr<Job>& job : jobs) {
    absl::MutexLock l(&job->mu);
    n += job->live.size();
  }
  return n;
}

void Shard::Shutdown() {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    absl::MutexLock l(&mu_);
    shutdown_ = true;
    for (const auto& [id, job] : jobs_) jobs.push_back(job);
  }
  for (const std::shared_ptr<Job>& job : jobs) {
    CloseJob(*job, absl::UnavailableError(absl::StrCat(
                       "shard ", options_.shard_id, " is shutting down")));
  }
  absl::MutexLock once(&shutdown_mu_);
  if (writer_.joinable()) {
    {
      absl::MutexLock l(&writer_mu_);
      writer_stop_ = true;
    }
    writer_.join();  // after it wrote what was queued
  }
  // A last checkpoint of whatever changed since the previous one, so a
  // graceful restart loses nothing (pending BSP pushes included).
  for (const std::shared_ptr<Job>& job : jobs) {
    if (!job->checkpointing) continue;
    bool changed;
    {
      absl::MutexLock l(&job->due_mu);
      changed = job->queued || job->pushes.load(std::memory_order_relaxed) !=
                                   job->pushes_at_snapshot;
    }
    if (changed) (void)WriteCheckpoint(job);
  }
}

// ---------------------------------------------------------------------------
// Stats.

void Shard::Stats(const StatsRequest& req, ShardStats* out) const {
  out->Clear();
  std::vector<std::shared_ptr<Job>> jobs;
  uint64_t chunks = 0;
  {
    absl::ReaderMutexLock l(&mu_);
    out->set_jobs(jobs_.size());
    out->set_bytes_held(bytes_held_);
    for (const auto& [id, job] : jobs_) {
      chunks += job->chunks.size();
      if (req.job_id().empty() || req.job_id() == id) jobs.push_back(job);
    }
  }
  out->set_shard_id(options_.shard_id);
  out->set_address(options_.address);
  out->set_uptime_s(absl::ToDoubleSeconds(absl::Now() - start_time_));
  out->set_chunks(chunks);
  out->set_memory_budget_bytes(options_.memory_budget_bytes);
  {
    absl::MutexLock l(&rejected_mu_);
    for (const auto& [reason, n] : rejected_)
      (*out->mutable_rejected())[reason] = n;
  }
  std::sort(jobs.begin(), jobs.end(),
            [](const auto& a, const auto& b) { return a->id < b->id; });

  for (const std::shared_ptr<Job>& job : jobs) {
    JobStats* js = out->add_job_stats();
    js->set_job_id(job->id);
    js->set_mode(job->mode);
    js->set_chunks(job->chunks.size());
    js->set_bytes_held(job->bytes);
    uint64_t version = UINT64_MAX;
    for (const std::unique_ptr<Chunk>& c : job->chunks) {
      version = std::min(version, c->version.load(std::memory_order_acquire));
    }
    if (version == UINT64_MAX) version = 0;
    js->set_version(version);

    std::vector<uint8_t> active;
    {
      absl::MutexLock l(&job->mu);
      active = job->active;
      for (const auto& [reason, n] : job->rejected) {
        (*js->mutable_rejected())[reason] = n;
      }
    }
    if (job->mode == BSP) {
      js->set_step(version);
      // Workers whose gradient for the step is missing on some chunk still
      // at that step. A step no worker has pushed to has not started (e.g.
      // the job is over): nobody is missing from it.
      std::vector<uint8_t> missing(job->num_workers, 0);
      for (const std::unique_ptr<Chunk>& c : job->chunks) {
        absl::MutexLock l(&c->mu);
        if (c->state.version != version) continue;
        bool started = false;
        for (uint32_t r = 0; r < job->num_workers; ++r)
          started |= c->state.pushed[r] != 0;
        if (!started) continue;
        for (uint32_t r = 0; r < job->num_workers; ++r) {
          if (c->active[r] && !c->state.pushed[r]) missing[r] = 1;
        }
      }
      for (uint32_t r = 0; r < job->num_workers; ++r) {
        if (missing[r]) js->add_missing_workers(r);
      }
    } else {
      // ASP/SSP: the slowest active worker's pushed steps.
      uint64_t slowest = UINT64_MAX;
      for (uint32_t r = 0; r < job->num_workers; ++r) {
        if (!active[r]) continue;
        const WorkerCounters& wc = job->workers[r];
        const uint64_t steps =
            wc.pushed_any.load(std::memory_order_relaxed)
                ? wc.last_step.load(std::memory_order_relaxed) + 1
                : 0;
        slowest = std::min(slowest, steps);
      }
      js->set_step(slowest == UINT64_MAX ? 0 : slowest);
    }
    for (uint32_t r = 0; r < job->num_workers; ++r) {
      const WorkerCounters& wc = job->workers[r];
      WorkerStats* ws = js->add_workers();
      ws->set_worker(r);
      ws->set_last_step(wc.last_step.load(std::memory_order_relaxed));
      ws->set_pushes(wc.pushes.load(std::memory_order_relaxed));
      ws->set_staleness(wc.staleness.load(std::memory_order_relaxed));
      ws->set_active(active[r] != 0);
    }
    js->set_pushes(job->pushes.load(std::memory_order_relaxed));
    js->set_pulls(job->pulls.load(std::memory_order_relaxed));
    js->set_bytes_in(job->bytes_in.load(std::memory_order_relaxed));
    js->set_bytes_out(job->bytes_out.load(std::memory_order_relaxed));
    js->set_apply_latency_p50_us(job->apply_ns.Percentile(0.5) / 1e3);
    js->set_apply_latency_p99_us(job->apply_ns.Percentile(0.99) / 1e3);
    js->set_duplicates(job->duplicates.load(std::memory_order_relaxed));
    js->set_stale_pushes(job->stale.load(std::memory_order_relaxed));
    job->staleness.ToProto(js->mutable_staleness());
    js->set_applies(job->applies.load(std::memory_order_relaxed));
    js->set_checkpoints(job->checkpoints.load(std::memory_order_relaxed));
    js->set_restored_from_step(job->restored_from_step);
  }
}

}  // namespace ps
