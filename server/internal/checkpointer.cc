#include "server/internal/checkpointer.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/internal/quorum.h"
#include "server/internal/reasons.h"
#include "server/internal/registration.h"
#include "server/internal/waits.h"
#include "spdlog/spdlog.h"

namespace ps {
namespace internal {
namespace {

// BSP: counts `c` toward `reached` once it is at next_due_step.
void NoteVersion(Job& job, Chunk& c)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.schedule.mu) {
  CheckpointSchedule& due = job.schedule;
  if (c.version.load(std::memory_order_acquire) >= due.next_due_step &&
      c.counted_for != due.next_due_step) {
    c.counted_for = due.next_due_step;
    ++due.reached;
  }
}

// Whether anything was pushed (dense or sparse) since the last snapshot.
bool PushedSince(const Job& job)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.schedule.mu) {
  const CheckpointSchedule& due = job.schedule;
  return job.counters.pushes.load(std::memory_order_relaxed) !=
             due.pushes_at_snapshot ||
         due.table_pushes.load(std::memory_order_relaxed) !=
             due.table_pushes_at_snapshot;
}

// Whether a checkpoint is due (not counting `queued`). BSP: every local
// chunk and the tables (their version counts steps) at next_due_step.
bool Due(const Job& job, absl::Time now)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.schedule.mu) {
  const CheckpointSchedule& due = job.schedule;
  // Nothing here ever changes.
  if (job.chunks.empty() && job.tables == nullptr) return false;
  if (job.every_steps > 0) {
    if (job.mode == BSP ? due.reached == job.chunks.size() &&
                              (job.tables == nullptr ||
                               job.tables->version() >= due.next_due_step)
                        : !job.chunks.empty() &&
                              job.SlowestWorkerSteps() >= due.next_due_step) {
      return true;
    }
  }
  return job.every_seconds > 0 && now >= due.next_due_time && PushedSince(job);
}

// Most pushes (BSP: those that complete no step here): whether a
// checkpoint may be due, decided without a lock. A BSP step count only
// moves with advanced chunks.
bool MaybeDue(const Job& job, absl::Time now) {
  const bool steps_due =
      job.mode != BSP && job.every_steps > 0 &&
      job.SlowestWorkerSteps() >=
          job.schedule.next_due_step_hint.load(std::memory_order_relaxed);
  const bool time_due =
      job.every_seconds > 0 &&
      absl::ToUnixNanos(now) >=
          job.schedule.next_due_time_ns.load(std::memory_order_relaxed);
  return steps_due || time_due;
}

// A checkpoint's content and what it covers: the dense part encoded but
// for its header, and the tables' copy still to be written.
struct Snapshot {
  std::optional<CheckpointEncoder> dense;
  std::optional<JobTables::Snapshot> tables;
  uint64_t sequence = 0;
  uint64_t step = 0;
  uint64_t min_version = 0;     // the lowest chunk version it holds
  uint64_t tables_version = 0;  // the tables' version it holds
  // The tables are an increment on this tables file.
  std::optional<TablesBase> tables_base;
};

// BSP: the lowest chunk version, or the tables' version when lower;
// ASP/SSP: the slowest active worker's applied (dense) steps (`steps`: per
// rank, over the chunks).
uint64_t CheckpointStep(const Job& job, const std::vector<uint8_t>& active,
                        const std::vector<uint64_t>& steps,
                        uint64_t min_version,
                        const std::optional<JobTables::Snapshot>& tables) {
  if (job.mode == BSP) {
    if (!tables.has_value()) return min_version;
    return job.chunks.empty() ? tables->version()
                              : std::min(min_version, tables->version());
  }
  return SlowestActive(
      job.num_workers, [&](uint32_t r) { return active[r] != 0; },
      [&](uint32_t r) { return steps[r]; });
}

// Whether the next tables checkpoint may be an increment: the job asks
// for them, and the previous one was written by this process with fewer
// than tables_full_every - 1 increments since the last full one.
bool WantIncrement(const Job& j) ABSL_EXCLUSIVE_LOCKS_REQUIRED(j.files.mu) {
  return j.tables != nullptr && j.tables_full_every > 1 && j.files.chained &&
         j.files.increments + 1 < j.tables_full_every;
}

// The membership, every chunk and the tables as one state: each chunk is
// copied under its own lock alone, so pushes to other chunks go on; the
// tables are frozen under their mutex (JobTables::TakeSnapshot: sparse
// exchanges wait for that only), as an increment when WantIncrement.
Snapshot TakeSnapshot(uint32_t shard_id, Job& j)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(j.files.mu) {
  absl::MutexLock m(&j.membership_update_mu);
  std::vector<uint8_t> active;
  {
    absl::MutexLock l(&j.waits.mu);
    active = j.waits.active;
  }
  Snapshot snap;
  snap.dense.emplace(shard_id, j.registration, active, *j.optimizer);
  std::vector<uint64_t> steps(j.num_workers, 0);
  uint64_t min_version = UINT64_MAX;
  for (const std::shared_ptr<Chunk>& c : j.chunks) {
    absl::MutexLock l(&c->mu);
    snap.dense->AddChunk(c->state);
    min_version = std::min(min_version, c->state.version);
    for (uint32_t r = 0; r < j.num_workers; ++r) {
      steps[r] = std::max(steps[r], c->state.next_step[r]);
    }
  }
  if (j.tables != nullptr) {
    snap.tables.emplace(j.tables->TakeSnapshot(WantIncrement(j)));
    snap.tables_version = snap.tables->version();
    if (snap.tables->incremental()) {
      snap.tables_base = TablesBase{j.files.chain_sequence,
                                    {j.files.chain_bytes, j.files.chain_crc}};
    }
  }
  snap.min_version = min_version == UINT64_MAX ? 0 : min_version;
  snap.step = CheckpointStep(j, active, steps, snap.min_version, snap.tables);
  snap.sequence = ++j.files.sequence;
  return snap;
}

// The tables file (if any: `*tables` says what was written), then the
// .ckpt naming it; the .ckpt's path.
absl::StatusOr<std::string> WriteFiles(const CheckpointStore& store,
                                       const std::string& job_id,
                                       Snapshot& snap,
                                       std::optional<TablesRef>* tables) {
  // The tables file first: the .ckpt naming it commits the pair.
  if (snap.tables.has_value()) {
    absl::StatusOr<TablesRef> ref = store.WriteTables(
        job_id, snap.sequence,
        [&](ByteSink& sink) { return std::move(*snap.tables).WriteTo(sink); },
        snap.tables_base);
    snap.tables.reset();  // frees the copy
    if (!ref.ok()) return ref.status();
    *tables = *ref;
  }
  return store.Write(
      job_id, snap.sequence,
      std::move(*snap.dense).Finish(snap.sequence, snap.step, *tables));
}

// After a checkpoint's write: what the next increment applies to.
void NoteTablesWritten(Job& j, const Snapshot& snap,
                       const absl::StatusOr<std::string>& path,
                       const std::optional<TablesRef>& tables)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(j.files.mu) {
  if (j.tables == nullptr) return;
  j.files.chained = path.ok() && tables.has_value();
  if (!j.files.chained) return;  // the next one is full
  j.files.chain_sequence = snap.sequence;
  j.files.chain_bytes = tables->bytes;
  j.files.chain_crc = tables->crc;
  j.files.increments =
      snap.tables_base.has_value() ? j.files.increments + 1 : 0;
}

// gate_replies: the answers up to `min_version` (the tables': up to
// `tables_version`) may go. A failed write releases them too: training goes
// on without this checkpoint (logged and counted), and a later restore falls
// back to an older one, which then refuses the lost steps loudly.
void ReleaseDurable(Job& j, uint64_t min_version, uint64_t tables_version) {
  std::vector<WaiterPtr> ready;
  {
    absl::MutexLock l(&j.waits.mu);
    j.waits.durable_version = std::max(j.waits.durable_version, min_version);
    ReleaseDurableWaiters(j, &ready);
  }
  CompleteAll(&ready);
  if (j.tables != nullptr) j.tables->SetDurableVersion(tables_version);
}

}  // namespace

void ScheduleNext(Job& job, uint64_t step, uint64_t pushes_then, absl::Time now,
                  uint64_t table_pushes_then) {
  CheckpointSchedule& due = job.schedule;
  due.pushes_at_snapshot = pushes_then;
  due.table_pushes_at_snapshot = table_pushes_then;
  due.next_due_step = job.every_steps > 0 ? step + job.every_steps : UINT64_MAX;
  due.next_due_step_hint.store(due.next_due_step, std::memory_order_relaxed);
  due.next_due_time = job.every_seconds > 0
                          ? now + absl::Seconds(job.every_seconds)
                          : absl::InfiniteFuture();
  due.next_due_time_ns.store(
      job.every_seconds > 0 ? absl::ToUnixNanos(due.next_due_time) : INT64_MAX,
      std::memory_order_relaxed);
  due.reached = 0;
  if (job.mode == BSP) {
    for (const std::shared_ptr<Chunk>& c : job.chunks) NoteVersion(job, *c);
  }
}

Checkpointer::~Checkpointer() { StopWriter(); }

absl::StatusOr<std::vector<std::string>> Checkpointer::Open(
    const std::string& dir) {
  if (store_ != nullptr) {
    return absl::FailedPreconditionError("checkpoints are already open");
  }
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointStore> store,
                      CheckpointStore::Open(dir, shard_id_));
  absl::StatusOr<std::vector<std::string>> ids = store->ListJobs();
  if (!ids.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint_dir: ", ids.status().message()));
  }
  prepared_dir_ = dir + "/prepared";
  std::error_code ec;
  if (std::filesystem::exists(prepared_dir_, ec)) {
    absl::MutexLock l(&prepared_mu_);
    PS_ASSIGN_OR_RETURN(prepared_,
                        CheckpointStore::Open(prepared_dir_, shard_id_));
  }
  store_ = std::move(store);
  return ids;
}

const CheckpointStore* Checkpointer::PreparedStore() const {
  absl::MutexLock l(&prepared_mu_);
  return prepared_.get();
}

absl::StatusOr<CheckpointStore::Loaded> Checkpointer::Load(
    const std::string& job_id, const CheckpointStore::Accept& accept) const {
  return store_->LoadLatest(job_id, accept);
}

void Checkpointer::Start() {
  writer_ = std::thread([this] { WriterLoop(); });
}

void Checkpointer::MaybeQueue(const std::shared_ptr<Job>& job,
                              absl::Span<Chunk* const> advanced, absl::Time now,
                              bool recheck) {
  if (!job->checkpointing) return;
  if (now == absl::InfinitePast() && job->every_seconds > 0) now = absl::Now();
  if (!recheck && advanced.empty() && !MaybeDue(*job, now)) return;
  {
    absl::MutexLock l(&job->schedule.mu);
    if (job->mode == BSP) {
      for (Chunk* c : advanced) NoteVersion(*job, *c);
    }
    if (job->schedule.queued || !Due(*job, now)) return;
    job->schedule.queued = true;
  }
  absl::MutexLock l(&writer_mu_);
  // After Shutdown stopped the writer, its final pass covers the job.
  if (!writer_stop_) writer_queue_.push_back(job);
}

void Checkpointer::AfterExchange(const std::shared_ptr<Job>& job,
                                 uint64_t version) {
  if (!job->checkpointing) return;
  const absl::Time now =
      job->every_seconds > 0 ? absl::Now() : absl::InfinitePast();
  const bool steps_due = job->mode == BSP && job->every_steps > 0 &&
                         version >= job->schedule.next_due_step_hint.load(
                                        std::memory_order_relaxed);
  if (!steps_due && !MaybeDue(*job, now)) return;
  MaybeQueue(job, {}, now, /*recheck=*/true);
}

void Checkpointer::WriterLoop() {
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
    (void)Write(job);
    absl::MutexLock l(&writer_mu_);
    writer_busy_ = false;
  }
}

void Checkpointer::Flush() {
  absl::MutexLock l(&writer_mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(writer_mu_) {
    return writer_queue_.empty() && !writer_busy_;
  };
  writer_mu_.Await(absl::Condition(&idle));
}

absl::Status Checkpointer::Write(const std::shared_ptr<Job>& job) {
  Job& j = *job;
  absl::Status status;
  uint64_t min_version = 0;
  uint64_t tables_version = 0;
  {
    absl::MutexLock w(&j.files.mu);
    if (j.files.removed) {
      absl::MutexLock l(&j.schedule.mu);
      j.schedule.queued = false;
      return absl::FailedPreconditionError(
          absl::StrCat("job \"", j.id, "\" was dropped"));
    }
    const uint64_t pushes_before =
        j.counters.pushes.load(std::memory_order_relaxed);
    const uint64_t table_pushes_before =
        j.schedule.table_pushes.load(std::memory_order_relaxed);
    Snapshot snap = TakeSnapshot(shard_id_, j);
    min_version = snap.min_version;
    tables_version = snap.tables_version;
    {
      absl::MutexLock l(&j.schedule.mu);
      j.schedule.queued = false;
      ScheduleNext(j, snap.step, pushes_before, absl::Now(),
                   table_pushes_before);
    }
    std::optional<TablesRef> tables;
    absl::StatusOr<std::string> path = WriteFiles(*store_, j.id, snap, &tables);
    NoteTablesWritten(j, snap, path, tables);
    if (path.ok()) {
      j.counters.checkpoints.fetch_add(1, std::memory_order_relaxed);
      spdlog::debug("job {}: checkpoint of step {} written to {}", j.id,
                    snap.step, *path);
    } else {
      status = path.status();
      j.rejected.Add(kCheckpointFailed);
      spdlog::error("job {}: checkpoint of step {} on shard {} failed: {}",
                    j.id, snap.step, shard_id_, std::string(status.message()));
    }
  }
  if (j.gate_replies) ReleaseDurable(j, min_version, tables_version);
  // Due again already (the chunks moved on while this one was copied, and
  // their triggers found it queued)?
  MaybeQueue(job, {}, absl::InfinitePast(), /*recheck=*/true);
  return status;
}

void Checkpointer::StopWriter() {
  if (!writer_.joinable()) return;
  {
    absl::MutexLock l(&writer_mu_);
    writer_stop_ = true;
  }
  writer_.join();  // after it wrote what was queued
}

void Checkpointer::Shutdown(const std::vector<std::shared_ptr<Job>>& jobs) {
  absl::MutexLock once(&shutdown_mu_);
  StopWriter();
  // A last checkpoint of whatever changed since the previous one, so a
  // graceful restart loses nothing (pending BSP pushes included).
  for (const std::shared_ptr<Job>& job : jobs) {
    if (!job->checkpointing) continue;
    bool changed;
    {
      absl::MutexLock l(&job->schedule.mu);
      changed = job->schedule.queued || PushedSince(*job);
    }
    if (changed) (void)Write(job);
  }
}

void Checkpointer::Remove(Job& job) {
  // A dropped job must not come back with the next restart.
  absl::MutexLock w(&job.files.mu);
  job.files.removed = true;
  if (absl::Status st = store_->Remove(job.id); !st.ok()) {
    spdlog::error("job {}: dropped, but its checkpoints remain: {}", job.id,
                  std::string(st.message()));
  }
  RemovePrepared(job.id);
}

absl::Status Checkpointer::WritePrepared(Job& j) {
  if (store_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("shard ", shard_id_, " has no checkpoint_dir"));
  }
  const CheckpointStore* prepared = nullptr;
  {
    absl::MutexLock l(&prepared_mu_);
    if (prepared_ == nullptr) {
      PS_ASSIGN_OR_RETURN(prepared_,
                          CheckpointStore::Open(prepared_dir_, shard_id_));
    }
    prepared = prepared_.get();
  }
  absl::MutexLock w(&j.files.mu);
  if (j.files.chained) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job \"", j.id, "\" wrote checkpoints already; not a prepared job"));
  }
  // No earlier move's state to fall back on if this one is torn.
  RemovePrepared(j.id);
  Snapshot snap = TakeSnapshot(shard_id_, j);
  std::optional<TablesRef> tables;
  absl::StatusOr<std::string> path = WriteFiles(*prepared, j.id, snap, &tables);
  if (!path.ok()) {
    return absl::Status(
        path.status().code(),
        absl::StrCat("the prepared state of job ", j.id, " on shard ",
                     shard_id_, ": ", path.status().message()));
  }
  spdlog::debug("job {}: prepared placement epoch {} written to {}", j.id,
                j.placement.epoch(), *path);
  return absl::OkStatus();
}

absl::StatusOr<CheckpointStore::Loaded> Checkpointer::LoadPrepared(
    const std::string& job_id, const CheckpointStore::Accept& accept) const {
  const CheckpointStore* prepared = PreparedStore();
  if (prepared == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("shard ", shard_id_, " has no prepared placements"));
  }
  return prepared->LoadLatest(job_id, accept);
}

absl::Status Checkpointer::RestorePrepared(JobCheckpoint ck, int local_count,
                                           Job& job) const {
  const CheckpointStore* prepared = PreparedStore();
  if (prepared == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("shard ", shard_id_, " has no prepared placements"));
  }
  return RestoreFrom(*prepared, std::move(ck), local_count, job);
}

void Checkpointer::RemovePrepared(const std::string& job_id) const {
  const CheckpointStore* prepared = PreparedStore();
  if (prepared == nullptr) return;
  if (absl::Status st = prepared->Remove(job_id); !st.ok()) {
    spdlog::error("job {}: its prepared placement stays on disk: {}", job_id,
                  std::string(st.message()));
  }
}

absl::Status Checkpointer::Restore(JobCheckpoint ck, int local_count,
                                   Job& job) const {
  return RestoreFrom(*store_, std::move(ck), local_count, job);
}

absl::Status Checkpointer::RestoreFrom(const CheckpointStore& store,
                                       JobCheckpoint ck, int local_count,
                                       Job& job) const {
  if (job.tables != nullptr && !ck.tables.has_value()) {
    return absl::InvalidArgumentError(
        "the registration has sparse tables, the checkpoint holds none");
  }
  if (job.tables == nullptr && ck.tables.has_value()) {
    return absl::InvalidArgumentError(
        "the checkpoint holds sparse tables, the registration has none");
  }
  if (job.tables != nullptr) {
    // First, so that a bad tables file costs no dense restore. An
    // increment: the full tables file and the increments up to it.
    PS_RETURN_IF_ERROR(store.ReadTablesChain(
        job.id, ck,
        [&](ByteSource& full, absl::Span<ByteSource* const> increments) {
          return job.tables->Restore(full, increments);
        }));
  }
  const std::vector<uint8_t> active = ck.active;
  PS_RETURN_IF_ERROR(
      RestoreJobState(std::move(ck), shard_id_, local_count, job));
  // The tables follow the job's membership (as SetMembership keeps them).
  if (job.tables != nullptr) job.tables->SetMembership(active);
  return absl::OkStatus();
}

absl::Status RestoreJobState(JobCheckpoint ck, uint32_t shard_id,
                             int local_count, Job& job) {
  if (ck.chunks.size() != static_cast<size_t>(local_count) ||
      ck.active.size() != job.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat(ck.chunks.size(), " chunks and ", ck.active.size(),
                     " workers, the registration gives ", local_count, " and ",
                     job.num_workers));
  }
  job.local.assign(job.placement.chunks_size(), -1);
  uint64_t min_version = UINT64_MAX;
  std::vector<uint64_t> steps(job.num_workers, 0);
  for (ChunkState& s : ck.chunks) {
    const uint32_t id = s.placement.chunk_id();
    if (id >= job.local.size() || job.local[id] >= 0 ||
        job.placement.chunks(id).shard() != shard_id) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk ", id, " is not a chunk of this shard"));
    }
    min_version = std::min(min_version, s.version);
    for (uint32_t r = 0; r < job.num_workers; ++r) {
      steps[r] = std::max(steps[r], s.next_step[r]);
    }
    job.local[id] = static_cast<int32_t>(job.chunks.size());
    const uint64_t version = s.version;
    auto c = std::make_shared<Chunk>(std::move(s), ck.active);
    c->version.store(version);
    job.chunks.push_back(std::move(c));
  }
  if (min_version == UINT64_MAX) min_version = 0;
  InitJobState(job, ck.active);
  {
    absl::MutexLock l(&job.waits.mu);
    if (job.mode != BSP) {
      // Each worker's applied steps: SSP's clock and the stats' step.
      for (uint32_t r = 0; r < job.num_workers; ++r) {
        job.waits.clock[r] = steps[r];
        if (steps[r] > 0) {
          job.counters.workers[r].pushed_any.store(true);
          job.counters.workers[r].last_step.store(steps[r] - 1);
        }
      }
    }
    job.waits.durable_version = min_version;
  }
  job.restored = true;
  job.restored_from_step = ck.step;
  {
    absl::MutexLock l(&job.files.mu);
    job.files.sequence = ck.sequence;
  }
  if (job.checkpointing) {
    absl::MutexLock l(&job.schedule.mu);
    ScheduleNext(job, ck.step, 0, absl::Now());
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace ps
