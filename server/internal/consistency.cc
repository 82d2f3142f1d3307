#include "server/internal/consistency.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/float_bytes.h"
#include "core/wire_format.h"
#include "server/internal/quorum.h"
#include "server/internal/waits.h"
#include "server/optimizer.h"

namespace ps {
namespace internal {
namespace {

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

// A plain gradient's floats: in place where the payload is one aligned
// piece on a little-endian host, else copied into `*scratch`.
const float* PlainFloats(const GradientIn& g, size_t length,
                         std::vector<float>* scratch) {
  const absl::string_view flat = g.flat_data();
  if (g.data.pieces.size() == 1 &&
      reinterpret_cast<uintptr_t>(flat.data()) % alignof(float) == 0) {
    return NativeFloats(flat, scratch);
  }
  scratch->resize(length);
  DecodeFloats(g.data, absl::MakeSpan(*scratch));
  return scratch->data();
}

// Applies `grad` * scale to c's values with the job's optimizer; with delta
// pulls, records which entries changed (c is at the new version next).
void ApplyToValues(Job& job, Chunk& c, const float* grad, float scale)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  ChunkState& s = c.state;
  if (!c.changes.enabled()) {
    job.optimizer->Apply(absl::MakeSpan(s.values), grad, scale, &s.optimizer);
    return;
  }
  // Reused by every apply on this thread (a chunk's length at most).
  static thread_local std::vector<float> before;
  before.assign(s.values.begin(), s.values.end());
  job.optimizer->Apply(absl::MakeSpan(s.values), grad, scale, &s.optimizer);
  c.changes.Record(before.data(), s.values, s.version + 1);
}

// A push's outcome over its chunks so far.
struct PushTally {
  PushCounts counts;
  uint64_t accepted = 0;
  uint64_t max_staleness = 0;
};

// Advances `c` one version and moves the waits it satisfies to `ready`.
void AdvanceVersion(Chunk& c, std::vector<WaiterPtr>* ready)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  const uint64_t v = ++c.state.version;
  c.version.store(v, std::memory_order_release);
  ReleaseWaiters(
      &c.waiters, [v](const Waiter& w) { return w.need_version <= v; }, ready);
}

// BSP: buffers the gradient of `worker` for the step being aggregated and
// applies the step when it completes the quorum. A plain gradient that
// comes with a keep stays where it arrived until then (no copy).
void BufferBspGradient(Job& job, Chunk& c, uint32_t worker, uint64_t step,
                       const GradientIn& g, PushTally* tally,
                       std::vector<WaiterPtr>* ready,
                       std::vector<Chunk*>* advanced)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  ChunkState& s = c.state;
  // Validation saw step <= version, and versions only grow.
  tally->max_staleness = std::max(tally->max_staleness, s.version - step);
  if (step < s.version) {
    ++tally->counts.stale;
    return;
  }
  if (s.pushed[worker]) {
    ++tally->counts.duplicates;
    return;
  }
  PendingGradient& pending = s.gradients[worker];
  pending.received.Clear();
  if (g.plain() && g.data.keep != nullptr) {
    pending.received = g.data;
  } else {
    // Native floats (sparse: scattered into zeros), so the rank-order sum
    // below is the same whatever the format.
    pending.floats.resize(c.length * sizeof(float));
    if (g.plain()) {
      DecodeFloats(g.data, AsFloats(pending.floats));
    } else {
      DecodePayload(g.format, g.flat_data(), g.indices,
                    AsFloats(pending.floats));
    }
  }
  s.pushed[worker] = 1;
  ++tally->accepted;
  if (ApplyStepIfReady(job, c, ready)) advanced->push_back(&c);
}

// ASP/SSP: the scale of a push. LR_RULE_NONE: 1 (the job's rate per push).
// LR_RULE_LINEAR: the global batch is a round of pushes, one per active
// rank, so a push is applied with lr x active / submitted num_workers: the
// job's rate at the submitted count, linear in the workers beyond it.
float AspScale(const Job& job) {
  if (job.linear_lr_workers == 0) return 1.0f;
  const uint32_t active = job.active_count.load(std::memory_order_acquire);
  return static_cast<float>(std::max(active, 1u)) /
         static_cast<float>(job.linear_lr_workers);
}

// ASP/SSP: applies the gradient on arrival (scaled by AspScale), unless
// this worker's step was already applied to `c`.
void ApplyAspGradient(Job& job, Chunk& c, uint32_t worker, uint64_t step,
                      const GradientIn& g, PushTally* tally,
                      std::vector<WaiterPtr>* ready,
                      std::vector<Chunk*>* advanced)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  // Big-endian hosts decode here, reused by every push on this thread.
  static thread_local std::vector<float> scratch;
  ChunkState& s = c.state;
  if (step < s.next_step[worker]) {
    ++tally->counts.duplicates;
    return;
  }
  s.next_step[worker] = step + 1;
  // Only a restored job sees a gradient ahead of the chunk.
  const uint64_t staleness = s.version >= g.version ? s.version - g.version : 0;
  tally->max_staleness = std::max(tally->max_staleness, staleness);
  job.counters.staleness.Record(staleness);
  // Straight from the request's bytes where they lie in one aligned piece,
  // or decoded from the pieces, or from the narrow or sparse format.
  const float* grad = nullptr;
  if (g.plain()) {
    grad = PlainFloats(g, c.length, &scratch);
  } else {
    scratch.resize(c.length);
    DecodePayload(g.format, g.flat_data(), g.indices, absl::MakeSpan(scratch));
    grad = scratch.data();
  }
  const uint64_t t0 = NowNanos();
  ApplyToValues(job, c, grad, AspScale(job));
  job.counters.apply_ns.Record(NowNanos() - t0);
  job.counters.applies.fetch_add(1, std::memory_order_relaxed);
  ++tally->accepted;
  AdvanceVersion(c, ready);
  advanced->push_back(&c);
}

// Adds a push's outcome to the job's and the worker's counters.
void RecordPush(Job& job, uint32_t worker, uint64_t step,
                const PushTally& tally, uint64_t bytes, uint64_t dense_bytes,
                uint64_t fallbacks) {
  JobCounters& jc = job.counters;
  jc.dense_bytes_in.fetch_add(dense_bytes, std::memory_order_relaxed);
  jc.wire_fallbacks.fetch_add(fallbacks, std::memory_order_relaxed);
  jc.pushes.fetch_add(tally.accepted, std::memory_order_relaxed);
  jc.duplicates.fetch_add(tally.counts.duplicates, std::memory_order_relaxed);
  jc.stale.fetch_add(tally.counts.stale, std::memory_order_relaxed);
  jc.bytes_in.fetch_add(bytes, std::memory_order_relaxed);
  WorkerCounters& wc = jc.workers[worker];
  StoreMax(wc.last_step, step);
  wc.pushed_any.store(true, std::memory_order_relaxed);
  wc.pushes.fetch_add(tally.accepted, std::memory_order_relaxed);
  wc.staleness.store(tally.max_staleness, std::memory_order_relaxed);
}

// SSP: moves the worker's clock past `step`, releasing the waits it was
// holding back.
void AdvanceClock(Job& job, uint32_t worker, uint64_t step,
                  std::vector<WaiterPtr>* ready) {
  absl::MutexLock l(&job.waits.mu);
  job.waits.clock[worker] = std::max(job.waits.clock[worker], step + 1);
  ReleaseClockWaiters(job, ready);
}

}  // namespace

PushCounts ApplyPush(Job& job, const PushArgs& push,
                     std::vector<WaiterPtr>* ready,
                     std::vector<Chunk*>* advanced) {
  const std::vector<Chunk*>& chunks = *push.chunks;
  PushTally tally;
  uint64_t bytes = 0, dense_bytes = 0, fallbacks = 0;
  const bool narrow = Resolved(job.wire_format) != FP32;
  for (size_t i = 0; i < chunks.size(); ++i) {
    Chunk& c = *chunks[i];
    const GradientIn& g = (*push.gradients)[i];
    bytes += g.data.size() + g.indices.size();
    dense_bytes += c.length * sizeof(float);
    // A narrow-format job's worker sends FP32 only when a value did not fit.
    fallbacks += narrow && Resolved(static_cast<WireFormat>(g.format)) == FP32;
    absl::MutexLock l(&c.mu);
    // Under the chunk's mutex, which a PAUSE takes: once it answered, no
    // push it names is buffered or applied (reshard.h). A paused BSP push
    // is never stale (the pause step is at or past every chunk's version).
    if (const uint64_t pause = job.pause_step.load(std::memory_order_acquire);
        PushPaused(job.mode, push.step, pause)) {
      tally.counts.paused_at = pause;
      break;
    }
    if (job.mode == BSP) {
      BufferBspGradient(job, c, push.worker, push.step, g, &tally, ready,
                        advanced);
    } else {
      ApplyAspGradient(job, c, push.worker, push.step, g, &tally, ready,
                       advanced);
    }
  }
  RecordPush(job, push.worker, push.step, tally, bytes, dense_bytes, fallbacks);
  // A paused push is sent again: its clock moves when it is taken whole.
  if (job.mode == SSP && tally.counts.paused_at == kNotPaused) {
    AdvanceClock(job, push.worker, push.step, ready);
  }
  return tally.counts;
}

// Step timelines: the shard's apply of BSP step `step` spans every chunk's.
void RecordBspApply(Job& job, uint64_t step, uint64_t t0, uint64_t t1) {
  // NowNanos is steady; the trace wants the wall clock of TraceRecorder.
  const int64_t shift = TraceRecorder::NowNs() - static_cast<int64_t>(t1);
  TraceSpan span;
  span.set_kind(TRACE_SHARD_APPLY);
  span.set_step(step);
  span.set_all_workers(true);
  span.set_start_ns(static_cast<int64_t>(t0) + shift);
  span.set_end_ns(static_cast<int64_t>(t1) + shift);
  job.trace.AddMerged(span);
}

bool ApplyStepIfReady(Job& job, Chunk& c, std::vector<WaiterPtr>* ready) {
  ChunkState& s = c.state;
  uint32_t members = 0, arrived = 0;
  for (uint32_t r = 0; r < job.num_workers; ++r) {
    if (!c.active[r]) continue;
    ++members;
    arrived += s.pushed[r];
  }
  if (!BspQuorumReached(members, arrived, job.backup_workers)) return false;
  const uint64_t t0 = NowNanos();
  // Rank order, into the lowest rank's buffer: the same bits whatever the
  // order the pushes came in, and wherever each gradient lies.
  float* sum = nullptr;
  for (uint32_t r = 0; r < job.num_workers; ++r) {
    if (!c.active[r] || !s.pushed[r]) continue;
    PendingGradient& g = s.gradients[r];
    const bool received = !g.received.pieces.empty();
    if (sum == nullptr) {
      if (received) {
        g.floats.resize(c.length * sizeof(float));
        DecodeFloats(g.received, AsFloats(g.floats));
      }
      sum = AsFloats(g.floats).data();
    } else if (received) {
      AddInto(absl::MakeSpan(sum, c.length), g.received);
    } else {
      AddInto(absl::MakeSpan(sum, c.length), AsFloats(g.floats).data());
    }
  }
  // The mean of the pushes, or under LR_RULE_LINEAR their sum over the
  // submitted worker count: lr x arrived / num_workers times the mean.
  const uint32_t divisor =
      job.linear_lr_workers != 0 ? job.linear_lr_workers : arrived;
  const float scale = 1.0f / static_cast<float>(divisor);
  ApplyToValues(job, c, sum, scale);
  if (job.replicated) {
    // What the backups apply in turn (Replicator: half the bytes of the
    // state with momentum).
    c.step_gradient.assign(sum, sum + c.length);
    c.step_gradient_scale = scale;
    c.step_gradient_version = s.version + 1;
  }
  std::fill(s.pushed.begin(), s.pushed.end(), 0);
  // The requests' receive buffers go back now, not at the next step.
  for (PendingGradient& g : s.gradients) g.received.Clear();
  const uint64_t t1 = NowNanos();
  job.counters.apply_ns.Record(t1 - t0);
  if (job.trace.Covers(s.version)) RecordBspApply(job, s.version, t0, t1);
  job.counters.applies.fetch_add(1, std::memory_order_relaxed);
  AdvanceVersion(c, ready);
  return true;
}

bool ChangeMembership(Job& job, const std::vector<uint8_t>& active,
                      std::vector<WaiterPtr>* ready,
                      std::vector<Chunk*>* advanced) {
  absl::MutexLock serial(&job.membership_update_mu);
  if (job.retired) return false;
  {
    absl::MutexLock l(&job.waits.mu);
    job.waits.active = active;
    uint32_t count = 0;
    for (uint32_t r = 0; r < job.num_workers; ++r) {
      job.is_active[r].store(active[r] != 0, std::memory_order_release);
      count += active[r] != 0;
    }
    job.active_count.store(count, std::memory_order_release);
    if (job.mode == SSP) ReleaseClockWaiters(job, ready);
  }
  for (const std::shared_ptr<Chunk>& c : job.chunks) {
    absl::MutexLock l(&c->mu);
    c->active = active;
    if (job.mode == BSP && ApplyStepIfReady(job, *c, ready)) {
      advanced->push_back(c.get());
    }
  }
  return true;
}

void SetPushPullConditions(const Job& job, uint64_t step, Waiter* w) {
  if (job.mode == BSP) w->need_version = step + 1;
  if (job.mode == SSP && step + 1 > job.staleness_bound) {
    w->need_clock = step + 1 - job.staleness_bound;
  }
}

void SetPullConditions(const Job& job, uint64_t step, uint64_t min_version,
                       Waiter* w) {
  w->need_version = min_version;
  if (job.mode == SSP && step > job.staleness_bound) {
    w->need_clock = step - job.staleness_bound;
  }
}

}  // namespace internal
}  // namespace ps
