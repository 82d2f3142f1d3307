#include "server/internal/checkpointer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
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

// Whether a checkpoint is due (not counting `queued`).
bool Due(const Job& job, absl::Time now)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.schedule.mu) {
  const CheckpointSchedule& due = job.schedule;
  if (job.chunks.empty()) return false;  // nothing here ever changes
  if (job.every_steps > 0) {
    if (job.mode == BSP ? due.reached == job.chunks.size()
                        : job.SlowestWorkerSteps() >= due.next_due_step) {
      return true;
    }
  }
  return job.every_seconds > 0 && now >= due.next_due_time &&
         job.counters.pushes.load(std::memory_order_relaxed) !=
             due.pushes_at_snapshot;
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

// A checkpoint's bytes and what it covers.
struct Snapshot {
  std::string bytes;
  uint64_t sequence = 0;
  uint64_t step = 0;
  uint64_t min_version = 0;  // the lowest chunk version it holds
};

// BSP: the lowest chunk version; ASP/SSP: the slowest active worker's
// applied steps (`steps`: per rank, over the chunks).
uint64_t CheckpointStep(const Job& job, const std::vector<uint8_t>& active,
                        const std::vector<uint64_t>& steps,
                        uint64_t min_version) {
  if (job.mode == BSP) return min_version;
  uint64_t slowest = UINT64_MAX;
  for (uint32_t r = 0; r < job.num_workers; ++r) {
    if (active[r]) slowest = std::min(slowest, steps[r]);
  }
  return slowest == UINT64_MAX ? 0 : slowest;
}

// The membership and every chunk as one state: each chunk is copied under
// its own lock alone, so pushes to other chunks go on.
Snapshot TakeSnapshot(uint32_t shard_id, Job& j)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(j.files.mu) {
  absl::MutexLock m(&j.membership_update_mu);
  std::vector<uint8_t> active;
  {
    absl::MutexLock l(&j.waits.mu);
    active = j.waits.active;
  }
  CheckpointEncoder enc(shard_id, j.registration, active, *j.optimizer);
  std::vector<uint64_t> steps(j.num_workers, 0);
  uint64_t min_version = UINT64_MAX;
  for (const std::unique_ptr<Chunk>& c : j.chunks) {
    absl::MutexLock l(&c->mu);
    enc.AddChunk(c->state);
    min_version = std::min(min_version, c->state.version);
    for (uint32_t r = 0; r < j.num_workers; ++r) {
      steps[r] = std::max(steps[r], c->state.next_step[r]);
    }
  }
  Snapshot snap;
  snap.min_version = min_version == UINT64_MAX ? 0 : min_version;
  snap.step = CheckpointStep(j, active, steps, snap.min_version);
  snap.sequence = ++j.files.sequence;
  snap.bytes = std::move(enc).Finish(snap.sequence, snap.step);
  return snap;
}

// gate_replies: the answers up to `min_version` may go. A failed write
// releases them too: training goes on without this checkpoint (logged and
// counted), and a later restore falls back to an older one, which then
// refuses the lost steps loudly.
void ReleaseDurable(Job& j, uint64_t min_version) {
  std::vector<WaiterPtr> ready;
  {
    absl::MutexLock l(&j.waits.mu);
    j.waits.durable_version = std::max(j.waits.durable_version, min_version);
    ReleaseDurableWaiters(j, &ready);
  }
  CompleteAll(&ready);
}

}  // namespace

void ScheduleNext(Job& job, uint64_t step, uint64_t pushes_then,
                  absl::Time now) {
  CheckpointSchedule& due = job.schedule;
  due.pushes_at_snapshot = pushes_then;
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
    for (const std::unique_ptr<Chunk>& c : job.chunks) NoteVersion(job, *c);
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
  store_ = std::move(store);
  return ids;
}

absl::StatusOr<CheckpointStore::Loaded> Checkpointer::Load(
    const std::string& job_id) const {
  return store_->LoadLatest(job_id);
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
    Snapshot snap = TakeSnapshot(shard_id_, j);
    min_version = snap.min_version;
    {
      absl::MutexLock l(&j.schedule.mu);
      j.schedule.queued = false;
      ScheduleNext(j, snap.step, pushes_before, absl::Now());
    }
    absl::StatusOr<std::string> path =
        store_->Write(j.id, snap.sequence, snap.bytes);
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
  if (j.gate_replies) ReleaseDurable(j, min_version);
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
      changed = job->schedule.queued ||
                job->counters.pushes.load(std::memory_order_relaxed) !=
                    job->schedule.pushes_at_snapshot;
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
    auto c = std::make_unique<Chunk>(std::move(s), ck.active);
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
