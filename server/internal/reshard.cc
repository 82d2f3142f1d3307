#include "server/internal/reshard.h"

#include <algorithm>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "server/internal/registration.h"
#include "server/internal/replica_apply.h"
#include "server/internal/reshard_replicas.h"

namespace ps {
namespace internal {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

// Whether a chunk holds a push of the step it aggregates.
bool HoldsPushes(const Chunk& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  return std::any_of(c.state.pushed.begin(), c.state.pushed.end(),
                     [](uint8_t p) { return p != 0; });
}

// The bytes of a chunk's state that travel: values and optimizer slots.
uint64_t StateBytes(const Job& job, uint64_t length) {
  return length * sizeof(float) + job.optimizer->StateBytes(length);
}

// Stores the answer of shard `from` to `req` into the fresh chunks.
absl::Status StoreFetched(Job& job, uint32_t from, uint64_t step,
                          const FetchChunksRequest& req,
                          const FetchChunksResponse& resp,
                          const absl::flat_hash_map<uint32_t, Chunk*>& fresh,
                          FetchTally* tally) {
  if (resp.chunks_size() != req.chunk_ids_size()) {
    return absl::DataLossError(absl::StrCat("shard ", from, " answered ",
                                            resp.chunks_size(), " chunks for ",
                                            req.chunk_ids_size()));
  }
  for (int i = 0; i < resp.chunks_size(); ++i) {
    const ReplicaChunk& r = resp.chunks(i);
    const std::string field =
        absl::StrCat("shard ", from, "'s chunks[", i, "]");
    if (r.chunk_id() != req.chunk_ids(i) || !r.gradient().empty()) {
      return absl::DataLossError(
          absl::StrCat(field, ": chunk ", r.chunk_id(), " (or a gradient) for ",
                       "the state of chunk ", req.chunk_ids(i)));
    }
    if (job.mode == BSP && r.version() != step) {
      return absl::FailedPreconditionError(
          absl::StrCat(field, ": chunk ", r.chunk_id(), " at version ",
                       r.version(), ", not at the pause step ", step));
    }
    Chunk& c = *fresh.at(r.chunk_id());
    absl::MutexLock l(&c.mu);
    PS_RETURN_IF_ERROR(CheckReplicaChunk(job, c, r, field));
    StoreReplicaChunk(job, c, r);
    ++tally->chunks;
    tally->bytes += r.values().size();
    for (const std::string& slot : r.slots()) tally->bytes += slot.size();
  }
  return absl::OkStatus();
}

// The old job's chunk counters and per-worker counters, into `next`.
void CopyCounters(const Job& old, Job& next) {
  const JobCounters& a = old.counters;
  JobCounters& b = next.counters;
  auto copy = [](const std::atomic<uint64_t>& from, std::atomic<uint64_t>& to) {
    to.store(from.load(std::memory_order_relaxed), std::memory_order_relaxed);
  };
  for (auto [from, to] : {std::pair{&a.pushes, &b.pushes},
                          {&a.pulls, &b.pulls},
                          {&a.bytes_in, &b.bytes_in},
                          {&a.bytes_out, &b.bytes_out},
                          {&a.dense_bytes_in, &b.dense_bytes_in},
                          {&a.dense_bytes_out, &b.dense_bytes_out},
                          {&a.wire_fallbacks, &b.wire_fallbacks},
                          {&a.delta_pulls, &b.delta_pulls},
                          {&a.delta_refused, &b.delta_refused},
                          {&a.duplicates, &b.duplicates},
                          {&a.stale, &b.stale},
                          {&a.applies, &b.applies},
                          {&a.checkpoints, &b.checkpoints}}) {
    copy(*from, *to);
  }
  b.fallback_logged.store(a.fallback_logged.load());
  for (uint32_t w = 0; w < next.num_workers; ++w) {
    const WorkerCounters& x = a.workers[w];
    WorkerCounters& y = b.workers[w];
    y.pushed_any.store(x.pushed_any.load(std::memory_order_relaxed));
    copy(x.last_step, y.last_step);
    copy(x.pushes, y.pushes);
    copy(x.staleness, y.staleness);
  }
}

}  // namespace

absl::Status CheckReplaceable(const Job& job) {
  if (job.replicated && job.mode != BSP) {
    // Its backups trail its primaries with no step to meet at.
    return Invalid(
        "spec.consistency.mode",
        absl::StrCat("job ", job.id, " has ", job.spec.replication(),
                     " copies of its chunks and is ",
                     ConsistencyMode_Name(job.mode),
                     "; a live re-placement moves replicated jobs under BSP "
                     "only"));
  }
  if (job.tables != nullptr && job.replicated) {
    return Invalid("spec.replication",
                   absl::StrCat("job ", job.id, " has sparse tables and ",
                                job.spec.replication(),
                                " copies; a live re-placement moves the "
                                "rows of unreplicated jobs only"));
  }
  if (job.tables != nullptr && job.mode != BSP) {
    return Invalid("spec.consistency.mode",
                   absl::StrCat("job ", job.id, " has sparse tables and is ",
                                ConsistencyMode_Name(job.mode),
                                "; a live re-placement moves rows under BSP "
                                "only"));
  }
  return absl::OkStatus();
}

absl::Status CheckNewEpoch(const Job& job, uint64_t epoch) {
  if (epoch > job.placement.epoch()) return absl::OkStatus();
  return Invalid("epoch",
                 absl::StrCat(epoch, " is not past job ", job.id,
                              "'s placement epoch ", job.placement.epoch()));
}

uint64_t MaxVersion(const Job& job) {
  uint64_t v = job.tables != nullptr ? job.tables->version() : 0;
  for (const std::shared_ptr<Chunk>& c : job.chunks) {
    v = std::max(v, c->version.load(std::memory_order_acquire));
  }
  return v;
}

bool Quiesced(const Job& job, uint64_t step) {
  // ASP/SSP: paused, every push is refused (Pause), whatever the versions.
  if (job.mode != BSP) return true;
  if (job.tables != nullptr && !job.tables->Quiesced(step)) return false;
  return std::all_of(job.chunks.begin(), job.chunks.end(),
                     [step](const std::shared_ptr<Chunk>& c) {
                       return c->version.load(std::memory_order_acquire) ==
                              step;
                     });
}

absl::StatusOr<bool> Pause(Job& job, uint64_t epoch, uint64_t step,
                           uint64_t* released) {
  Replacement& r = job.replacement;
  *released = 0;
  if (r.epoch == epoch && r.step == step) return Quiesced(job, step);
  // First the pause, then each chunk under its lock (the push path checks
  // the pause under the same lock before it buffers): a push either got in
  // before and is seen here, or sees the pause.
  const uint64_t before = job.pause_step.load(std::memory_order_acquire);
  job.pause_step.store(step, std::memory_order_seq_cst);
  for (const std::shared_ptr<Chunk>& c : job.chunks) {
    absl::MutexLock l(&c->mu);
    const uint64_t v = c->state.version;
    // ASP/SSP: taking each lock is the point (a push applying now ends
    // first; later ones see the pause).
    if (job.mode != BSP) continue;
    if (v < step || (v == step && !HoldsPushes(*c))) continue;
    job.pause_step.store(before, std::memory_order_seq_cst);
    return absl::FailedPreconditionError(absl::StrCat(
        "pause_step: ", ChunkName(c->placement), " of job ", job.id,
        v > step ? absl::StrCat(" is at version ", v, ", past step ", step)
                 : absl::StrCat(" holds pushes of step ", step),
        "; pause at a later step"));
  }
  if (job.tables != nullptr) {
    // The rows pause at the same step (a push of it buffered, or the
    // tables past it: FAILED_PRECONDITION, the pause as it was).
    if (absl::Status st = job.tables->Pause(step).status(); !st.ok()) {
      job.pause_step.store(before, std::memory_order_seq_cst);
      return st;
    }
  }
  *released = DropPrepared(job);
  r.row_streams.clear();
  r.epoch = epoch;
  r.step = step;
  r.quiesced_logged = false;
  return Quiesced(job, step);
}

uint64_t DropPrepared(Job& job) {
  Replacement& r = job.replacement;
  const uint64_t reserved = r.reserved;
  r.prepared = nullptr;
  r.prepared_answer.Clear();
  r.reserved = 0;
  // The generation moves: a PREPARE still fetching discards what it built.
  r.preparing = false;
  ++r.generation;
  return reserved;
}

uint64_t LiftPause(Job& job) {
  const uint64_t released = DropPrepared(job);
  job.replacement.row_streams.clear();
  if (job.tables != nullptr) job.tables->Unpause();
  job.replacement.epoch = 0;
  job.replacement.step = 0;
  job.pause_step.store(kNotPaused, std::memory_order_seq_cst);
  return released;
}

absl::Status CopyChunks(Job& job, uint32_t shard_id,
                        const FetchChunksRequest& req,
                        FetchChunksResponse* resp) {
  resp->Clear();
  uint64_t step = 0;
  {
    absl::MutexLock l(&job.replacement.mu);
    if (req.epoch() == 0 || job.replacement.epoch != req.epoch() ||
        job.replacement.committed) {
      return absl::FailedPreconditionError(absl::StrCat(
          "epoch: job ", job.id, " is not paused for placement epoch ",
          req.epoch(), " on shard ", shard_id));
    }
    step = job.replacement.step;
  }
  std::vector<Chunk*> chunks;
  absl::flat_hash_set<uint32_t> seen;
  for (int i = 0; i < req.chunk_ids_size(); ++i) {
    const uint32_t id = req.chunk_ids(i);
    Chunk* c = job.LocalChunk(id);
    if (c == nullptr || !seen.insert(id).second) {
      return Invalid(absl::StrCat("chunk_ids[", i, "]"),
                     absl::StrCat("chunk ", id,
                                  c == nullptr ? " is not on shard "
                                               : " listed twice on shard ",
                                  shard_id));
    }
    chunks.push_back(c);
  }
  for (Chunk* c : chunks) {
    absl::MutexLock l(&c->mu);
    // Checked under the lock: an ABORT may have lifted the pause. ASP/SSP
    // chunks stand at their own versions (Pause).
    if (job.mode == BSP && c->state.version != step) {
      resp->Clear();
      return absl::FailedPreconditionError(absl::StrCat(
          ChunkName(c->placement), " of job ", job.id, " is at version ",
          c->state.version, ", not at the pause step ", step, " on shard ",
          shard_id));
    }
    CopyChunk(job, *c, /*acked=*/0, resp->add_chunks());
  }
  return absl::OkStatus();
}

absl::StatusOr<ReplacementPlan> PlanReplacement(const Job& old,
                                                const ReshardRequest& req,
                                                uint32_t shard_id,
                                                bool can_checkpoint) {
  const Placement& to = req.placement();
  if (to.epoch() != req.epoch()) {
    return Invalid("placement.epoch", absl::StrCat(to.epoch(), ", but epoch ",
                                                   "is ", req.epoch()));
  }
  RegisterJobRequest reg = old.registration;
  *reg.mutable_placement() = to;
  ReplacementPlan plan;
  plan.shard_id = shard_id;
  int local_count = 0;
  PS_ASSIGN_OR_RETURN(plan.job,
                      NewJob(reg, shard_id, can_checkpoint, &local_count));
  plan.held = static_cast<uint32_t>(local_count);
  for (const ChunkPlacement& c : to.chunks()) {
    if (!HoldsCopyOf(c, shard_id) || old.LocalChunk(c.chunk_id()) != nullptr) {
      continue;
    }
    // Replicated: from its acting primary (every copy is at the pause
    // step; CheckCopiesInService).
    const uint32_t from = CopySource(old, old.placement.chunks(c.chunk_id()));
    if (from >= static_cast<uint32_t>(req.shard_addresses_size()) ||
        req.shard_addresses(from).empty()) {
      return Invalid("shard_addresses",
                     absl::StrCat("no address of shard ", from,
                                  ", which holds ", ChunkName(c), " now"));
    }
    plan.fetch[from].push_back(c.chunk_id());
    plan.fetch_bytes += ChunkBytes(*plan.job, c.length());
  }
  // Copies held here in another role are copied here (BuildChunks): new
  // memory too until COMMIT frees the old ones.
  for (const ChunkPlacement& c : to.chunks()) {
    const Chunk* held = old.LocalChunk(c.chunk_id());
    if (held != nullptr && HoldsCopyOf(c, shard_id) &&
        !SameCopies(held->placement, c)) {
      plan.fetch_bytes += ChunkBytes(*plan.job, c.length());
    }
  }
  plan.job->restored = old.restored;
  plan.job->restored_from_step = old.restored_from_step;
  return plan;
}

namespace {

// Fetch requests in flight at once during a PREPARE.
constexpr size_t kFetchesInFlight = 4;

// plan.fetch cut into requests of at most `batch_bytes` of values and
// slots (at least one chunk each), with the shard each goes to.
std::vector<std::pair<uint32_t, FetchChunksRequest>> Batches(
    const Job& job, const ReplacementPlan& plan, uint64_t batch_bytes) {
  std::vector<std::pair<uint32_t, FetchChunksRequest>> batches;
  for (const auto& [from, ids] : plan.fetch) {
    for (size_t i = 0; i < ids.size();) {
      FetchChunksRequest req;
      req.set_job_id(job.id);
      req.set_epoch(job.placement.epoch());
      for (uint64_t bytes = 0; i < ids.size(); ++i) {
        const uint64_t b =
            StateBytes(job, job.placement.chunks(ids[i]).length());
        if (req.chunk_ids_size() > 0 && bytes + b > batch_bytes) break;
        req.add_chunk_ids(ids[i]);
        bytes += b;
      }
      batches.emplace_back(from, std::move(req));
    }
  }
  return batches;
}

// Fetches `batches`, kFetchesInFlight at once (a link or a core is not left
// idle while one answer is encoded, sent and stored), into the chunks of
// `fresh`; the first error (naming the shard and the chunks) stops the rest.
absl::StatusOr<FetchTally> FetchAll(
    Job& job, uint64_t step,
    const std::vector<std::pair<uint32_t, FetchChunksRequest>>& batches,
    const FetchBatch& fetch,
    const absl::flat_hash_map<uint32_t, Chunk*>& fresh) {
  absl::Mutex mu;
  FetchTally tally;
  absl::Status first;
  size_t next = 0;
  auto run = [&] {
    for (;;) {
      size_t i;
      {
        absl::MutexLock l(&mu);
        if (!first.ok() || next == batches.size()) return;
        i = next++;
      }
      const auto& [from, req] = batches[i];
      FetchChunksResponse resp;
      FetchTally got;
      absl::Status st = fetch(from, req, &resp);
      if (st.ok()) st = StoreFetched(job, from, step, req, resp, fresh, &got);
      absl::MutexLock l(&mu);
      tally.chunks += got.chunks;
      tally.bytes += got.bytes;
      if (!st.ok() && first.ok()) {
        first = absl::Status(
            st.code(),
            absl::StrCat("fetching chunks [",
                         absl::StrJoin(req.chunk_ids(), ", "), "] of job ",
                         job.id, " from shard ", from, ": ", st.message()));
      }
    }
  };
  std::vector<std::thread> threads;
  const size_t n = std::min(kFetchesInFlight, batches.size());
  for (size_t t = 1; t < n; ++t) threads.emplace_back(run);
  run();
  for (std::thread& t : threads) t.join();
  if (!first.ok()) return first;
  return tally;
}

}  // namespace

absl::StatusOr<FetchTally> BuildChunks(const Job& old, uint64_t step,
                                       uint64_t batch_bytes,
                                       const FetchBatch& fetch,
                                       ReplacementPlan& plan) {
  Job& job = *plan.job;
  std::vector<uint8_t> active;
  {
    absl::MutexLock l(&old.waits.mu);
    active = old.waits.active;
  }
  absl::flat_hash_map<uint32_t, Chunk*> fresh;
  for (const auto& [from, ids] : plan.fetch) {
    for (uint32_t id : ids) fresh[id] = nullptr;
  }
  job.local.assign(job.placement.chunks_size(), -1);
  std::vector<Chunk*> created;  // not shared with `old`
  for (const ChunkPlacement& p : job.placement.chunks()) {
    if (!HoldsCopyOf(p, plan.shard_id)) continue;
    const uint32_t id = p.chunk_id();
    std::shared_ptr<Chunk> c;
    Chunk* held = old.LocalChunk(id);  // PlanReplacement: unless fetched
    if (auto it = fresh.find(id); it != fresh.end()) {
      c = std::make_shared<Chunk>(
          NewChunkState(p, *job.optimizer, job.num_workers), active);
      it->second = c.get();
      created.push_back(c.get());
    } else if (SameCopies(held->placement, p)) {
      c = old.chunks[old.local[id]];
    } else {
      // Held here in another role (replicated): a copy of its own, since a
      // chunk's acknowledgement state is indexed by its copies.
      c = CopyLocally(old, *held, job, p, active);
      created.push_back(c.get());
    }
    job.local[id] = static_cast<int32_t>(job.chunks.size());
    job.chunks.push_back(std::move(c));
  }
  PS_ASSIGN_OR_RETURN(
      FetchTally tally,
      FetchAll(job, step, Batches(job, plan, batch_bytes), fetch, fresh));
  InitWorkerState(job, active);
  for (Chunk* c : created) {
    if (job.replicated) MarkCopiesInSync(*c);
    if (job.delta_pulls) {
      absl::MutexLock l(&c->mu);
      c->changes.Start(c->state.version, c->length, job.num_workers);
    }
  }
  return tally;
}

void CarryOver(Job& old, Job& next) {
  std::vector<uint8_t> active;
  std::vector<uint64_t> clock;  // SSP: each worker's next step
  {
    absl::MutexLock l(&old.waits.mu);
    active = old.waits.active;
    clock = old.waits.clock;
  }
  uint32_t count = 0;
  for (uint32_t r = 0; r < next.num_workers; ++r) {
    next.is_active[r].store(active[r] != 0, std::memory_order_release);
    count += active[r] != 0;
  }
  next.active_count.store(count, std::memory_order_release);
  if (next.tables != nullptr) next.tables->SetMembership(active);
  for (const std::shared_ptr<Chunk>& c : next.chunks) {
    absl::MutexLock l(&c->mu);
    c->active = active;
    // SSP: a chunk fetched from another shard took each worker's pushes up
    // to its next_step, which is that worker's clock there; a shard new to
    // the job has heard none of them, and must not hold a worker's pull
    // back for its own earlier steps.
    if (next.mode != SSP) continue;
    for (size_t w = 0; w < clock.size() && w < c->state.next_step.size(); ++w) {
      clock[w] = std::max(clock[w], c->state.next_step[w]);
    }
  }
  {
    absl::MutexLock l(&next.waits.mu);
    next.waits.active = active;
    next.waits.clock = std::move(clock);
  }
  CopyCounters(old, next);
  google::protobuf::Map<std::string, uint64_t> rejected;
  old.rejected.CopyTo(&rejected);
  for (const auto& [reason, n] : rejected) next.rejected.Set(reason, n);
  const TraceWindow window = old.trace.window();
  if (window.end_step() > window.begin_step()) next.trace.SetWindow(window);
}

}  // namespace internal
}  // namespace ps
