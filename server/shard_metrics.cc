#include "server/shard_metrics.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/metric_writer.h"

namespace ps {
namespace {

MetricLabels With(MetricLabels labels, const std::string& name,
                  const std::string& value) {
  labels.push_back({name, value});
  return labels;
}

void WriteShard(const ShardStats& s, const MetricLabels& shard,
                MetricWriter* w) {
  w->Gauge("ps_shard_jobs", "Jobs held by the shard.", shard, s.jobs());
  w->Gauge("ps_shard_chunks", "Dense chunks held by the shard.", shard,
           s.chunks());
  w->Gauge("ps_shard_memory_bytes",
           "Bytes held against the shard's memory budget.", shard,
           s.bytes_held());
  w->Gauge("ps_shard_memory_budget_bytes", "The shard's memory budget.", shard,
           s.memory_budget_bytes());
  for (const auto& [reason, n] : s.rejected()) {
    w->Counter("ps_shard_rejected_requests_total",
               "Requests the shard refused outside any job, by reason.",
               With(shard, "reason", reason), n);
  }
}

void WriteTraffic(const JobStats& j, const MetricLabels& job, MetricWriter* w) {
  w->Counter("ps_pushes_total", "Chunk gradients accepted.", job, j.pushes());
  w->Counter("ps_pulls_total", "Chunk reads served.", job, j.pulls());
  w->Counter("ps_received_bytes_total",
             "Gradient bytes received (chunk data and indices, as sent).", job,
             j.bytes_in());
  w->Counter("ps_sent_bytes_total",
             "Parameter bytes sent (chunk data and indices, as sent).", job,
             j.bytes_out());
  w->Counter("ps_duplicate_pushes_total", "Duplicate chunk gradients dropped.",
             job, j.duplicates());
  w->Counter("ps_stale_pushes_total", "Stale chunk gradients dropped.", job,
             j.stale_pushes());
  for (const auto& [reason, n] : j.rejected()) {
    w->Counter("ps_rejected_requests_total", "Requests refused, by reason.",
               With(job, "reason", reason), n);
  }
  for (const auto& [method, h] : j.request_seconds()) {
    w->Histogram("ps_request_duration_seconds",
                 "Time from a request's arrival to its answer, waits "
                 "included, by method.",
                 With(job, "method", method),
                 HistogramFromProto(h, /*integers=*/false));
  }
  w->Gauge("ps_pending_requests",
           "Pull and PushPull requests waiting (quorum, SSP bound, "
           "checkpoint).",
           job, j.pending_waits());
}

void WriteProgress(const JobStats& j, const MetricLabels& job,
                   MetricWriter* w) {
  w->Gauge("ps_applied_steps",
           "Lowest chunk version on the shard: updates applied to every "
           "chunk.",
           job, j.version());
  w->Counter("ps_optimizer_applies_total", "Optimizer applications to chunks.",
             job, j.applies());
  w->Histogram("ps_apply_duration_seconds",
               "Time to apply the optimizer to one chunk.", job,
               HistogramFromProto(j.apply_seconds(), /*integers=*/false));
  w->Histogram("ps_push_staleness",
               "Versions a pushed gradient was behind its chunk (ASP/SSP).",
               job, HistogramFromProto(j.staleness(), /*integers=*/true));
  w->Gauge("ps_job_memory_bytes",
           "Parameters, optimizer state, gradient buffers and table rows.", job,
           j.bytes_held());
  w->Counter("ps_checkpoints_total", "Checkpoints written by this process.",
             job, j.checkpoints());
  for (const WorkerStats& ws : j.workers()) {
    const MetricLabels worker = With(job, "worker", absl::StrCat(ws.worker()));
    w->Counter("ps_worker_pushes_total", "Chunk gradients accepted per worker.",
               worker, ws.pushes());
    w->Gauge("ps_worker_staleness",
             "Staleness of the worker's latest push, in versions.", worker,
             ws.staleness());
    w->Gauge("ps_worker_active", "1 when the worker counts toward quorum.",
             worker, ws.active() ? 1 : 0);
  }
}

// Replicated jobs (JobStats' replica fields; all zero otherwise): a backup
// dropped from the acknowledgement set shows here as well as in the log.
void WriteReplicas(const JobStats& j, const MetricLabels& job,
                   MetricWriter* w) {
  if (j.backup_chunks() == 0 && j.replica_forwards() == 0 &&
      j.replica_drops() == 0 && j.replica_epoch() == 0) {
    return;
  }
  w->Counter("ps_replica_forwards_total",
             "Chunk states acknowledged by a backup (replicated jobs).", job,
             j.replica_forwards());
  w->Counter("ps_replica_drops_total",
             "Backups dropped from a chunk's acknowledgement set because the "
             "coordinator failed them (replicated jobs).",
             job, j.replica_drops());
  w->Gauge("ps_replica_epoch", "The replica view's epoch (replicated jobs).",
           job, j.replica_epoch());
  w->Gauge("ps_replica_backup_chunks",
           "Chunks held here as a backup, not served (replicated jobs).", job,
           j.backup_chunks());
}

void WriteTables(const JobStats& j, const MetricLabels& job, MetricWriter* w) {
  for (const TableStats& t : j.tables()) {
    const MetricLabels table = With(job, "table", t.name());
    w->Gauge("ps_table_rows", "Sparse-table rows held.", table, t.rows());
    w->Gauge("ps_table_memory_bytes",
             "Sparse-table bytes: rows, state, index, admission counters.",
             table, t.bytes_used());
    w->Counter("ps_table_admissions_total", "Sparse-table rows created.", table,
               t.admissions());
    w->Counter("ps_table_evictions_total", "Sparse-table rows evicted.",
               With(table, "reason", "ttl"), t.evicted_ttl());
    w->Counter("ps_table_evictions_total", "Sparse-table rows evicted.",
               With(table, "reason", "lru"), t.evicted_lru());
    w->Counter("ps_table_pulled_rows_total", "Sparse-table rows served.", table,
               t.rows_pulled());
    w->Counter("ps_table_pushed_rows_total", "Sparse-table rows updated.",
               table, t.rows_pushed());
  }
}

}  // namespace

std::vector<prometheus::MetricFamily> ShardMetricFamilies(
    const ShardStats& stats) {
  MetricWriter w;
  const MetricLabels shard = {{"shard", absl::StrCat(stats.shard_id())}};
  WriteShard(stats, shard, &w);
  for (const JobStats& j : stats.job_stats()) {
    const MetricLabels job = With(shard, "job", j.job_id());
    WriteTraffic(j, job, &w);
    WriteProgress(j, job, &w);
    WriteReplicas(j, job, &w);
    WriteTables(j, job, &w);
  }
  return w.Take();
}

std::vector<prometheus::MetricFamily> ShardMetrics::Collect() const {
  ShardStats stats;
  shard_->Stats(StatsRequest(), &stats);
  return ShardMetricFamilies(stats);
}

}  // namespace ps
