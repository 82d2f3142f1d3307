// WorkerMetrics: a worker's training progress as Prometheus metrics
// (workerd's /metrics). The trainer's progress reports (about once a
// second, worker/trainer/progress_meter.h) replace the held Progress; a
// scrape copies it under the mutex and renders the copy, so a scrape never
// holds a lock the training loop waits for while it renders, and the step
// loop itself is untouched.
//
//   auto metrics = std::make_shared<WorkerMetrics>();
//   metrics->Update("job-7", /*rank=*/1, progress);   // each report
//   MetricsServer::Start(options, metrics, &security);
//
// Series (labels job, worker = the rank): the current job's, or the last
// job's until the next one starts; so a workerd exports one job at a time.
#ifndef WORKER_WORKER_METRICS_H_
#define WORKER_WORKER_METRICS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "proto/coordinator.pb.h"

namespace ps {

// `progress` of `job_id`'s worker `rank` as metric families.
std::vector<prometheus::MetricFamily> WorkerMetricFamilies(
    const std::string& job_id, uint32_t rank, const Progress& progress);

// Thread-safe.
class WorkerMetrics : public prometheus::Collectable {
 public:
  // The latest progress of the worker's job (a new job replaces the last).
  void Update(const std::string& job_id, uint32_t rank,
              const Progress& progress) ABSL_LOCKS_EXCLUDED(mu_);

  // Empty before the first Update.
  std::vector<prometheus::MetricFamily> Collect() const override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  std::string job_id_ ABSL_GUARDED_BY(mu_);  // "" = no job yet
  uint32_t rank_ ABSL_GUARDED_BY(mu_) = 0;
  Progress progress_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // WORKER_WORKER_METRICS_H_
