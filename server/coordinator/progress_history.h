// ProgressHistory: each job's training curve in memory, the leader's
// progress reports (loss, accuracy, samples/s, step split) by step, bounded
// per job. The coordinator keeps one beside its job table and serves it
// (GetHistory, the status page); with a job store it is filled from the
// store at restart, so a curve survives a coordinator restart.
//
//   ProgressHistory history(/*max_points=*/1000);
//   history.Add("job-000001", report.progress());
//   std::vector<Progress> curve = history.Get("job-000001");
//
// Bounded like the store's history (job_store.h): once a job has more than
// max_points points, every second point of its older half is dropped (the
// first stays), so a long run keeps its whole span, finest for the newest
// steps. A report for a step at or before the job's last point replaces the
// points from that step on (a rejoined leader repeats steps).
#ifndef SERVER_COORDINATOR_PROGRESS_HISTORY_H_
#define SERVER_COORDINATOR_PROGRESS_HISTORY_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "proto/coordinator.pb.h"

namespace ps {

// Thread-compatible: the owner serializes calls (JobCoordinator holds its
// mutex; Get copies, so callers render outside it).
class ProgressHistory {
 public:
  // PsdConfig.progress_history_rows (checked there); below 4 counts as 4.
  explicit ProgressHistory(size_t max_points);

  // Appends the job's point for progress.step().
  void Add(const std::string& job_id, const Progress& progress);
  // Replaces the job's curve (a restart's reload), oldest step first; the
  // bound applies.
  void Set(const std::string& job_id, std::vector<Progress> points);
  // The job's points, oldest step first; empty for a job with none.
  std::vector<Progress> Get(const std::string& job_id) const;

 private:
  void Thin(std::vector<Progress>& points) const;

  const size_t max_points_;
  absl::flat_hash_map<std::string, std::vector<Progress>> curves_;
};

}  // namespace ps

#endif  // SERVER_COORDINATOR_PROGRESS_HISTORY_H_
