#include "server/internal/waits.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/float_bytes.h"
#include "core/wire_format.h"
#include "spdlog/spdlog.h"

namespace ps {
namespace internal {
namespace {

// Takes the claim on `w` (false: another path has it) and its job.
bool Claim(const WaiterPtr& w, std::shared_ptr<Job>* job) {
  if (w->claimed.exchange(true, std::memory_order_acq_rel)) return false;
  *job = std::move(w->job);
  return true;
}

void RunDone(const WaiterPtr& w, const absl::Status& status) {
  std::function<void(absl::Status)> done = std::move(w->done);
  w->done = nullptr;
  done(status);
}

// Encodes `c`'s values in the job's wire format into `out`; returns the
// ChunkData.format used (FP32, logged once per job, when they do not fit).
WireFormat EncodeParameters(Job& job, const Chunk& c, std::string* out)
    ABSL_SHARED_LOCKS_REQUIRED(c.mu) {
  const WireFormat used = EncodeValues(job.wire_format, c.state.values, out);
  if (Resolved(used) != Resolved(job.wire_format) &&
      !job.counters.fallback_logged.exchange(true)) {
    spdlog::warn(
        "job {}: {} holds a value beyond {}; parameters of such chunks are "
        "sent as FP32 (JobStats.wire_fallback_chunks counts them)",
        job.id, ChunkName(c.placement), WireFormatName(job.wire_format));
  }
  return used;
}

// The chunk's values encoded at its current version, shared by every reply
// of that version.
SharedBytes SharedEncoding(Job& job, Chunk& c)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  if (c.encoded == nullptr || c.encoded_version != c.state.version) {
    // use_count() only falls behind our back (replies being released), so
    // 1 means no reply holds the buffer and it may be rewritten.
    if (c.encoded == nullptr || c.encoded.use_count() > 1) {
      c.encoded = std::make_shared<std::string>();
    }
    c.encoded_format = EncodeParameters(job, c, c.encoded.get());
    c.encoded_version = c.state.version;
  }
  return c.encoded;
}

// The delta of `c` on top of `base` for `worker` (null: answer in full),
// shared by every reply of the same (base, version).
std::shared_ptr<DeltaEncoding> SharedDelta(Job& job, Chunk& c, uint32_t worker,
                                           uint64_t base)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  const uint64_t version = c.state.version;
  if (c.delta != nullptr && c.delta->base == base &&
      c.delta->version == version &&
      c.changes.CanServe(worker, base, version)) {
    return c.delta;
  }
  // As SharedEncoding: rewritten in place when no reply holds it.
  std::shared_ptr<DeltaEncoding> reuse;
  if (c.delta != nullptr && c.delta.use_count() == 1)
    reuse = std::move(c.delta);
  std::shared_ptr<DeltaEncoding> d =
      EncodeDelta(c.changes, worker, c.state.values, base, version,
                  job.wire_format, std::move(reuse));
  if (d != nullptr) c.delta = d;
  return d;
}

// What FillReply answered, for the job's counters.
struct ReplyTally {
  uint64_t bytes = 0;  // ChunkData data + indices
  uint64_t fallbacks = 0;
  uint64_t deltas = 0;
  uint64_t refused = 0;
};

// Chunk `i` of `w`'s answer into `d`: a delta on the version the worker
// holds when it asked for one and that is smaller, else in full.
void FillChunk(Job& job, const Waiter& w, size_t i, ChunkData* d,
               ReplyTally* tally) {
  Chunk& c = *w.chunks[i];
  absl::MutexLock l(&c.mu);
  d->set_chunk_id(c.placement.chunk_id());
  d->set_version(c.state.version);
  const uint64_t base = w.bases.empty() ? kNoBase : w.bases[i];
  std::shared_ptr<DeltaEncoding> delta;
  if (base != kNoBase) {
    delta = SharedDelta(job, c, w.worker, base);
    ++(delta != nullptr ? tally->deltas : tally->refused);
  }
  if (delta != nullptr) {
    d->set_base_version(base);
    d->set_format(delta->format);
    d->set_indices(delta->indices);
    if (w.payloads == nullptr) {
      d->set_data(delta->data);
    } else {
      // Shares the encoding (the aliasing constructor keeps it alive).
      w.payloads->push_back(SharedBytes(delta, &delta->data));
    }
    tally->bytes += delta->data.size() + delta->indices.size();
  } else if (w.payloads == nullptr) {
    d->set_format(EncodeParameters(job, c, d->mutable_data()));
    tally->bytes += d->data().size();
  } else {
    // Encoded once per version: the other replies of it share the bytes.
    w.payloads->push_back(SharedEncoding(job, c));
    d->set_format(c.encoded_format);
    tally->bytes += w.payloads->back()->size();
  }
  const bool in_job_format = Resolved(d->format()) == Resolved(job.wire_format);
  tally->fallbacks += !in_job_format;
  // The next delta for this worker builds on what it now holds; a reply in
  // FP32 instead of the job's narrow format is no base for one.
  c.changes.SetAnswered(w.worker, in_job_format ? c.state.version : kNoBase);
}

// Writes the answer of `w` into its response; returns what it answered.
ReplyTally FillReply(Job& job, const Waiter& w) {
  w.out->Clear();
  w.out->Reserve(static_cast<int>(w.chunks.size()));
  ReplyTally tally;
  for (size_t i = 0; i < w.chunks.size(); ++i) {
    FillChunk(job, w, i, w.out->Add(), &tally);
  }
  JobCounters& jc = job.counters;
  jc.wire_fallbacks.fetch_add(tally.fallbacks, std::memory_order_relaxed);
  jc.delta_pulls.fetch_add(tally.deltas, std::memory_order_relaxed);
  jc.delta_refused.fetch_add(tally.refused, std::memory_order_relaxed);
  return tally;
}

// Files `w` under each condition that does not hold yet.
void FileConditions(Job& job, const WaiterPtr& w) {
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
    absl::MutexLock l(&job.waits.mu);
    if (job.MinActiveClock() < w->need_clock) {
      w->pending.fetch_add(1);
      job.waits.clock_waiters.push_back(w);
    }
  }
  for (size_t i = 0; i < w->need_replicated.size(); ++i) {
    Chunk* c = w->chunks[i];
    absl::MutexLock l(&c->mu);
    if (!ReplicatedTo(*c, w->need_replicated[i])) {
      w->pending.fetch_add(1);
      c->replica_waiters.emplace_back(w, w->need_replicated[i]);
    }
  }
  // gate_replies: an answer waits for the checkpoint of its version too
  // (replicated jobs wait per chunk instead, above).
  if (w->need_version > 0 && job.gate_replies) {
    absl::MutexLock l(&job.waits.mu);
    if (job.waits.durable_version < w->need_version) {
      w->pending.fetch_add(1);
      job.waits.durable_waiters.push_back(w);
    }
  }
}

// A wait past its deadline, taken out of the registry.
struct Expired {
  WaiterPtr w;
  std::vector<uint32_t> clock_missing;  // SSP: workers holding it back
};

std::vector<Expired> TakeExpired(Job& job, absl::Time now) {
  std::vector<Expired> expired;
  absl::MutexLock l(&job.waits.mu);
  for (auto it = job.waits.live.begin(); it != job.waits.live.end();) {
    const WaiterPtr& w = it->second;
    if (w->deadline > now) {
      ++it;
      continue;
    }
    Expired e{w, {}};
    if (w->need_clock > 0 && job.MinActiveClock() < w->need_clock) {
      for (uint32_t r = 0; r < job.num_workers; ++r) {
        if (job.waits.active[r] && job.waits.clock[r] < w->need_clock) {
          e.clock_missing.push_back(r);
        }
      }
    }
    expired.push_back(std::move(e));
    job.waits.live.erase(it++);
  }
  return expired;
}

// BSP: the lowest unfinished step among the wait's chunks (UINT64_MAX:
// none), and in `missing` every active worker whose gradient for it has not
// arrived.
uint64_t UnfinishedStep(const Job& job, const Waiter& w,
                        std::vector<uint32_t>* missing) {
  uint64_t step = UINT64_MAX;
  std::vector<uint8_t> is_missing(job.num_workers, 0);
  for (Chunk* c : w.chunks) {
    absl::MutexLock l(&c->mu);
    if (c->state.version >= w.need_version) continue;
    step = std::min(step, c->state.version);
    for (uint32_t r = 0; r < job.num_workers; ++r) {
      if (c->active[r] && !c->state.pushed[r]) is_missing[r] = 1;
    }
  }
  for (uint32_t r = 0; r < job.num_workers; ++r) {
    if (is_missing[r]) missing->push_back(r);
  }
  return step;
}

// The error of an expired wait, e.g. "job j step 12: no gradient from
// workers 1, 2 after 60000 ms".
absl::Status DeadlineError(const Job& job, const Expired& e) {
  const Waiter& w = *e.w;
  std::vector<uint32_t> ranks;
  uint64_t step = UnfinishedStep(job, w, &ranks);
  if (step == UINT64_MAX && e.clock_missing.empty() && job.gate_replies &&
      w.need_version > 0) {
    return absl::DeadlineExceededError(
        absl::StrCat("job ", job.id, " step ", w.need_version - 1,
                     ": the checkpoint of version ", w.need_version,
                     " was not written within ", job.deadline_ms, " ms"));
  }
  if (step == UINT64_MAX && e.clock_missing.empty() &&
      job.ForwardsInitialState() &&
      std::any_of(w.chunks.begin(), w.chunks.end(), [](const Chunk* c) {
        return !c->initial_replicated.load();
      })) {
    return absl::DeadlineExceededError(
        absl::StrCat("job ", job.id,
                     ": the initial state (spec.init.from_job) did not "
                     "reach every live copy within ",
                     job.deadline_ms,
                     " ms (a copy promoted before it got it cannot serve)"));
  }
  if (step == UINT64_MAX && e.clock_missing.empty() && job.replicated &&
      w.need_version > 0) {
    return absl::DeadlineExceededError(
        absl::StrCat("job ", job.id, " step ", w.need_version - 1, ": version ",
                     w.need_version, " did not reach every live backup within ",
                     job.deadline_ms, " ms"));
  }
  if (step == UINT64_MAX && e.clock_missing.empty() &&
      !w.need_replicated.empty()) {
    return absl::DeadlineExceededError(
        absl::StrCat("job ", job.id, " step ", w.step, " of worker ", w.worker,
                     ": the push did not reach every live backup within ",
                     job.deadline_ms, " ms"));
  }
  if (step == UINT64_MAX) {
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
          : absl::StrCat(" (SSP staleness ", job.staleness_bound, ": step ",
                         w.step, " waits for the slowest)");
  return absl::DeadlineExceededError(absl::StrCat("job ", job.id, " step ",
                                                  step, ": ", what, " after ",
                                                  job.deadline_ms, " ms", ssp));
}

}  // namespace

WaiterPtr NewWaiter(const std::shared_ptr<Job>& job, uint64_t id,
                    std::vector<Chunk*> chunks, uint64_t step,
                    ChunkDataList* out, std::vector<SharedBytes>* payloads,
                    std::function<void(absl::Status)> done) {
  auto w = std::make_shared<Waiter>();
  w->id = id;
  w->chunks = std::move(chunks);
  w->step = step;
  w->deadline = absl::Now() + absl::Milliseconds(job->deadline_ms);
  w->out = out;
  w->payloads = payloads;
  w->job = job;
  w->done = std::move(done);
  return w;
}

void StartWait(const std::shared_ptr<Job>& job, WaiterPtr w) {
  // Replicated: an answer carrying version v of a chunk waits until every
  // live backup holds v of that chunk, chunk by chunk (the first chunks of
  // a BSP step are answered while the later ones are still forwarded).
  if (job->replicated && w->need_version > 0 && w->need_replicated.empty()) {
    w->need_replicated.assign(w->chunks.size(), w->need_version);
  }
  // Warm-started from a job: no answer before the backups hold the
  // initial state (version 0 answers too; a pull of ASP/SSP at any
  // version).
  if (job->ForwardsInitialState() && w->need_replicated.empty() &&
      std::any_of(w->chunks.begin(), w->chunks.end(), [](const Chunk* c) {
        return !c->initial_replicated.load();
      })) {
    w->need_replicated.assign(w->chunks.size(), w->need_version);
  }
  // Nothing to wait for (ASP PushPull, most Pulls): answer without touching
  // the job mutex, unless the job is closing.
  if (w->need_version == 0 && w->need_clock == 0 &&
      w->need_replicated.empty() &&
      !job->waits.is_closed.load(std::memory_order_acquire)) {
    w->registered = false;
    Complete(w);
    return;
  }
  absl::Status closed;
  {
    absl::MutexLock l(&job->waits.mu);
    closed = job->waits.closed;
    if (closed.ok()) job->waits.live.emplace(w->id, w);
  }
  if (!closed.ok()) {
    Fail(w, closed);
    return;
  }
  FileConditions(*job, w);
  if (w->pending.fetch_sub(1) == 1) Complete(w);
}

void Complete(const WaiterPtr& w) {
  std::shared_ptr<Job> job;
  if (!Claim(w, &job)) return;
  if (w->registered) {
    absl::MutexLock l(&job->waits.mu);
    job->waits.live.erase(w->id);
  }
  if (w->out != nullptr) {
    const uint64_t bytes = FillReply(*job, *w).bytes;
    uint64_t dense_bytes = 0;
    for (const Chunk* c : w->chunks) dense_bytes += c->length * sizeof(float);
    job->counters.pulls.fetch_add(w->chunks.size(), std::memory_order_relaxed);
    job->counters.bytes_out.fetch_add(bytes, std::memory_order_relaxed);
    job->counters.dense_bytes_out.fetch_add(dense_bytes,
                                            std::memory_order_relaxed);
  }
  job->counters.request_ns[w->method].Record(
      static_cast<uint64_t>(absl::GetCurrentTimeNanos() - w->start_ns));
  RunDone(w, absl::OkStatus());
}

void Fail(const WaiterPtr& w, const absl::Status& status) {
  std::shared_ptr<Job> job;
  if (!Claim(w, &job)) return;
  if (job != nullptr) {
    absl::MutexLock l(&job->waits.mu);
    job->waits.live.erase(w->id);
  }
  RunDone(w, status);
}

void CompleteAll(std::vector<WaiterPtr>* ready) {
  for (const WaiterPtr& w : *ready) Complete(w);
  ready->clear();
}

void CloseJob(Job& job, const absl::Status& status) {
  std::vector<WaiterPtr> waiters;
  {
    absl::MutexLock l(&job.waits.mu);
    if (job.waits.closed.ok()) job.waits.closed = status;
    job.waits.is_closed.store(true, std::memory_order_release);
    for (auto& [id, w] : job.waits.live) waiters.push_back(w);
    job.waits.live.clear();
    job.waits.clock_waiters.clear();
    job.waits.durable_waiters.clear();
  }
  for (const std::shared_ptr<Chunk>& c : job.chunks) {
    absl::MutexLock l(&c->mu);
    c->waiters.clear();
    c->replica_waiters.clear();
  }
  for (const WaiterPtr& w : waiters) Fail(w, status);
  job.held_pushes.Close(status);
  if (job.tables != nullptr) job.tables->Close(status);
  if (job.table_replicas != nullptr) job.table_replicas->Close(status);
}

void FailExpiredWaits(Job& job, absl::Time now) {
  for (const Expired& e : TakeExpired(job, now)) {
    if (e.w->claimed.load(std::memory_order_acquire)) continue;
    Fail(e.w, DeadlineError(job, e));
  }
  job.held_pushes.Expire(now);
  if (job.tables != nullptr) job.tables->CheckDeadlines(now);
  if (job.table_replicas != nullptr) {
    job.table_replicas->CheckDeadlines(now);
  }
}

void ReleaseClockWaiters(Job& job, std::vector<WaiterPtr>* ready) {
  const uint64_t slowest = job.MinActiveClock();
  ReleaseWaiters(
      &job.waits.clock_waiters,
      [slowest](const Waiter& w) { return w.need_clock <= slowest; }, ready);
}

void ReleaseReplicaWaiters(Chunk& c, std::vector<WaiterPtr>* ready) {
  auto keep = c.replica_waiters.begin();
  for (auto& [w, need] : c.replica_waiters) {
    if (w->claimed.load(std::memory_order_acquire)) continue;
    if (ReplicatedTo(c, need)) {
      if (w->pending.fetch_sub(1) == 1) ready->push_back(std::move(w));
      continue;
    }
    *keep++ = {std::move(w), need};
  }
  c.replica_waiters.erase(keep, c.replica_waiters.end());
}

void ReleaseDurableWaiters(Job& job, std::vector<WaiterPtr>* ready) {
  const uint64_t durable = job.waits.durable_version;
  ReleaseWaiters(
      &job.waits.durable_waiters,
      [durable](const Waiter& w) { return w.need_version <= durable; }, ready);
}

}  // namespace internal
}  // namespace ps
