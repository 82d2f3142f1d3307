#include "server/coordinator/progress_history.h"

#include <algorithm>
#include <utility>

namespace ps {

namespace {
// Fewer points than this could not be thinned (Thin drops from the older
// half only).
constexpr size_t kMinPoints = 4;
}  // namespace

ProgressHistory::ProgressHistory(size_t max_points)
    : max_points_(std::max(max_points, kMinPoints)) {}

void ProgressHistory::Add(const std::string& job_id, const Progress& progress) {
  std::vector<Progress>& points = curves_[job_id];
  // A repeated or earlier step (a rejoin) starts the tail again from there.
  while (!points.empty() && points.back().step() >= progress.step()) {
    points.pop_back();
  }
  points.push_back(progress);
  Thin(points);
}

void ProgressHistory::Set(const std::string& job_id,
                          std::vector<Progress> points) {
  std::stable_sort(
      points.begin(), points.end(),
      [](const Progress& a, const Progress& b) { return a.step() < b.step(); });
  while (points.size() > max_points_) Thin(points);
  curves_[job_id] = std::move(points);
}

std::vector<Progress> ProgressHistory::Get(const std::string& job_id) const {
  auto it = curves_.find(job_id);
  return it == curves_.end() ? std::vector<Progress>() : it->second;
}

void ProgressHistory::Thin(std::vector<Progress>& points) const {
  if (points.size() <= max_points_) return;
  // Keep rows 1, 3, 5, ... (1-based) of the older half and the newer half
  // whole: the store's rule (job_store.cc ThinHistory).
  const size_t half = points.size() / 2;
  size_t out = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    if (i < half && i % 2 == 1) continue;
    if (out != i) points[out] = std::move(points[i]);
    ++out;
  }
  points.resize(out);
}

}  // namespace ps
