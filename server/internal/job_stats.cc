#include "server/internal/job_stats.h"

#include <algorithm>
#include <vector>

#include "server/internal/quorum.h"

namespace ps {
namespace internal {
namespace {

// Latency histograms in seconds, with bounds 2^10 ns (1 us) to 2^35 ns
// (34 s): JobStats.apply_seconds and request_seconds.
constexpr double kNanosecond = 1e-9;
constexpr int kMinLatencyLog2 = 10;
constexpr int kMaxLatencyLog2 = 35;

// BSP: workers whose gradient for the step being aggregated (`version`) is
// missing on some chunk still at that step. A step no worker has pushed to
// has not started (e.g. the job is over): nobody is missing from it.
void AddMissingWorkers(const Job& job, uint64_t version, JobStats* js) {
  std::vector<uint8_t> missing(job.num_workers, 0);
  for (const std::shared_ptr<Chunk>& c : job.chunks) {
    absl::MutexLock l(&c->mu);
    if (c->state.version != version) continue;
    bool started = false;
    for (uint32_t r = 0; r < job.num_workers; ++r) {
      started |= c->state.pushed[r] != 0;
    }
    if (!started) continue;
    for (uint32_t r = 0; r < job.num_workers; ++r) {
      if (c->active[r] && !c->state.pushed[r]) missing[r] = 1;
    }
  }
  for (uint32_t r = 0; r < job.num_workers; ++r) {
    if (missing[r]) js->add_missing_workers(r);
  }
}

// ASP/SSP: the slowest active worker's pushed steps.
uint64_t SlowestSteps(const Job& job, const std::vector<uint8_t>& active) {
  return SlowestActive(
      job.num_workers, [&](uint32_t r) { return active[r] != 0; },
      [&](uint32_t r) { return job.counters.workers[r].Steps(); });
}

void AddWorkers(const Job& job, const std::vector<uint8_t>& active,
                JobStats* js) {
  for (uint32_t r = 0; r < job.num_workers; ++r) {
    const WorkerCounters& wc = job.counters.workers[r];
    WorkerStats* ws = js->add_workers();
    ws->set_worker(r);
    ws->set_last_step(wc.last_step.load(std::memory_order_relaxed));
    ws->set_pushes(wc.pushes.load(std::memory_order_relaxed));
    ws->set_staleness(wc.staleness.load(std::memory_order_relaxed));
    ws->set_active(active[r] != 0);
  }
}

void AddCounters(const Job& job, JobStats* js) {
  const JobCounters& jc = job.counters;
  js->set_pushes(jc.pushes.load(std::memory_order_relaxed));
  js->set_pulls(jc.pulls.load(std::memory_order_relaxed));
  js->set_bytes_in(jc.bytes_in.load(std::memory_order_relaxed));
  js->set_bytes_out(jc.bytes_out.load(std::memory_order_relaxed));
  js->set_apply_latency_p50_us(jc.apply_ns.Percentile(0.5) / 1e3);
  js->set_apply_latency_p99_us(jc.apply_ns.Percentile(0.99) / 1e3);
  js->set_duplicates(jc.duplicates.load(std::memory_order_relaxed));
  js->set_stale_pushes(jc.stale.load(std::memory_order_relaxed));
  jc.staleness.ToProto(js->mutable_staleness());
  jc.apply_ns.ToProto(kNanosecond, kMinLatencyLog2, kMaxLatencyLog2,
                      js->mutable_apply_seconds());
  for (int m = 0; m < kNumRequestMethods; ++m) {
    const LatencyHistogram& h = jc.request_ns[m];
    if (h.count() == 0) continue;
    h.ToProto(kNanosecond, kMinLatencyLog2, kMaxLatencyLog2,
              &(*js->mutable_request_seconds())[RequestMethodName(
                  static_cast<RequestMethod>(m))]);
  }
  js->set_applies(jc.applies.load(std::memory_order_relaxed));
  js->set_checkpoints(jc.checkpoints.load(std::memory_order_relaxed));
  if (job.replicated) {
    uint32_t backups = 0;
    uint32_t copied = 0;
    for (const std::shared_ptr<Chunk>& c : job.chunks) {
      if (job.Serves(*c)) continue;
      ++backups;
      if (c->copied.load()) ++copied;
    }
    js->set_backup_chunks(backups);
    js->set_replica_copied_chunks(copied);
    js->set_replica_joining(job.view->Joining(job.view->self()));
    js->set_replica_forwards(jc.replica_forwards.load());
    js->set_replica_drops(jc.replica_drops.load());
    js->set_replica_epoch(job.view->epoch());
  }
}

// Wire bytes, their dense FP32 equivalent, per step and the ratio.
void AddWireCounters(const Job& job, JobStats* js) {
  const JobCounters& jc = job.counters;
  const uint64_t in = jc.bytes_in.load(std::memory_order_relaxed);
  const uint64_t out = jc.bytes_out.load(std::memory_order_relaxed);
  const uint64_t dense_in = jc.dense_bytes_in.load(std::memory_order_relaxed);
  const uint64_t dense_out = jc.dense_bytes_out.load(std::memory_order_relaxed);
  js->set_dense_bytes_in(dense_in);
  js->set_dense_bytes_out(dense_out);
  uint64_t steps = 0;  // worker steps pushed, summed over the workers
  for (uint32_t r = 0; r < job.num_workers; ++r) {
    steps += jc.workers[r].Steps();
  }
  if (steps > 0) {
    js->set_wire_bytes_in_per_step(static_cast<double>(in) / steps);
    js->set_wire_bytes_out_per_step(static_cast<double>(out) / steps);
  }
  if (in > 0) js->set_compression_ratio_in(static_cast<double>(dense_in) / in);
  if (out > 0) {
    js->set_compression_ratio_out(static_cast<double>(dense_out) / out);
  }
  js->set_wire_fallback_chunks(
      jc.wire_fallbacks.load(std::memory_order_relaxed));
  js->set_delta_pulls(jc.delta_pulls.load(std::memory_order_relaxed));
  js->set_delta_refused(jc.delta_refused.load(std::memory_order_relaxed));
}

}  // namespace

void FillJobStats(const Job& job, JobStats* js) {
  js->set_job_id(job.id);
  js->set_mode(job.mode);
  js->set_chunks(job.chunks.size());
  js->set_bytes_held(job.bytes +
                     (job.tables != nullptr ? job.tables->bytes_used() : 0));
  if (job.tables != nullptr) job.tables->FillStats(js);
  const uint64_t version = job.LowestVersion();
  js->set_version(version);
  std::vector<uint8_t> active;
  {
    absl::MutexLock l(&job.waits.mu);
    active = job.waits.active;
    js->set_pending_waits(job.waits.live.size());
  }
  job.rejected.CopyTo(js->mutable_rejected());
  if (job.mode == BSP) {
    js->set_step(version);
    AddMissingWorkers(job, version, js);
  } else {
    js->set_step(SlowestSteps(job, active));
  }
  AddWorkers(job, active, js);
  AddCounters(job, js);
  AddWireCounters(job, js);
  js->set_restored_from_step(job.restored_from_step);
}

}  // namespace internal
}  // namespace ps
