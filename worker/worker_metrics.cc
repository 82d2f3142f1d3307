#include "worker/worker_metrics.h"

#include "absl/strings/str_cat.h"
#include "common/metric_writer.h"

namespace ps {
namespace {

// A ctr model's table traffic and hot-row cache (Progress.sparse).
void WriteSparse(const SparseProgress& s, const MetricLabels& worker,
                 MetricWriter& w) {
  w.Counter("ps_worker_table_rows_pushed_total",
            "Table rows this worker pushed for training.", worker,
            s.rows_pushed());
  w.Counter("ps_worker_table_rows_pulled_total",
            "Table rows this worker pulled for training (the row cache's "
            "misses when it has one).",
            worker, s.rows_pulled());
  w.Counter("ps_worker_row_cache_hits_total",
            "Table rows read from the worker's hot-row cache.", worker,
            s.row_cache_hits());
  w.Counter("ps_worker_row_cache_misses_total",
            "Table rows the hot-row cache left to pull.", worker,
            s.row_cache_misses());
  w.Counter("ps_worker_row_cache_evictions_total",
            "Rows evicted from the hot-row cache.", worker,
            s.row_cache_evictions());
  w.Counter("ps_worker_row_cache_saved_bytes_total",
            "Wire bytes the hot-row cache's hits saved (ids and rows).", worker,
            s.row_cache_bytes_saved());
  w.Gauge("ps_worker_row_cache_bytes", "Bytes the hot-row cache holds.", worker,
          s.row_cache_bytes_used());
  const uint64_t reads = s.row_cache_hits() + s.row_cache_misses();
  if (reads > 0) {
    w.Gauge("ps_worker_row_cache_hit_ratio",
            "Share of the rows read that the hot-row cache answered.", worker,
            static_cast<double>(s.row_cache_hits()) / reads);
  }
}

}  // namespace

std::vector<prometheus::MetricFamily> WorkerMetricFamilies(
    const std::string& job_id, uint32_t rank, const Progress& p) {
  MetricWriter w;
  const MetricLabels worker = {{"job", job_id}, {"worker", absl::StrCat(rank)}};
  auto phase = [&](const char* name) {
    MetricLabels labels = worker;
    labels.push_back({"phase", name});
    return labels;
  };
  const std::string split_help =
      "Step time by phase: waiting for data, computing, blocked on the "
      "network (exposed communication).";
  w.Counter("ps_worker_step_seconds_total", split_help, phase("data"),
            p.data_s());
  w.Counter("ps_worker_step_seconds_total", split_help, phase("compute"),
            p.compute_s());
  w.Counter("ps_worker_step_seconds_total", split_help, phase("communication"),
            p.comm_s());
  w.Gauge("ps_worker_step", "Steps done (the job's step counter).", worker,
          p.step());
  w.Gauge("ps_worker_total_steps", "Steps the job runs.", worker,
          p.total_steps());
  w.Gauge("ps_worker_epoch", "Epoch of the latest step.", worker, p.epoch());
  w.Gauge("ps_worker_samples_per_second",
          "Training examples per second over the whole job (every worker).",
          worker, p.samples_per_s());
  w.Gauge("ps_worker_loss", "Training loss since the previous report.", worker,
          p.loss());
  w.Gauge("ps_worker_train_accuracy",
          "Training accuracy since the previous report (0 to 1).", worker,
          p.train_accuracy());
  if (p.test_accuracy() >= 0) {
    w.Gauge("ps_worker_test_accuracy",
            "Accuracy on the test set at the latest evaluation (0 to 1).",
            worker, p.test_accuracy());
  }
  if (p.has_sparse()) WriteSparse(p.sparse(), worker, w);
  w.Gauge("ps_worker_elapsed_seconds", "Seconds since the run started.", worker,
          p.elapsed_s());
  return w.Take();
}

void WorkerMetrics::Update(const std::string& job_id, uint32_t rank,
                           const Progress& progress) {
  absl::MutexLock l(&mu_);
  job_id_ = job_id;
  rank_ = rank;
  progress_ = progress;
}

std::vector<prometheus::MetricFamily> WorkerMetrics::Collect() const {
  std::string job_id;
  uint32_t rank;
  Progress progress;
  {
    absl::MutexLock l(&mu_);
    if (job_id_.empty()) return {};
    job_id = job_id_;
    rank = rank_;
    progress = progress_;
  }
  return WorkerMetricFamilies(job_id, rank, progress);
}

}  // namespace ps
