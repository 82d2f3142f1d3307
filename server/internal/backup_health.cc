#include "server/internal/backup_health.h"

#include <algorithm>

namespace ps {
namespace internal {

BackupHealth::BackupHealth(Options options)
    : deadline_(options.deadline),
      max_deadline_(std::max(options.deadline, options.max_deadline)) {}

absl::Duration BackupHealth::DeadlineFor(uint32_t backup) const {
  const auto it = health_.find(backup);
  return it == health_.end() ? deadline_ : it->second.deadline;
}

void BackupHealth::Answered(uint32_t backup) {
  auto it = health_.find(backup);
  if (it == health_.end()) return;
  Health& h = it->second;
  h.failing_since = absl::InfinitePast();
  h.exhausted = false;
  h.deadline = std::max(deadline_, h.deadline / 2);
  // Back at the default: nothing left to remember.
  if (h.deadline == deadline_) health_.erase(it);
}

void BackupHealth::Failed(uint32_t backup, const absl::Status& s,
                          absl::Duration used, absl::Time now) {
  auto it = health_.find(backup);
  if (it == health_.end()) {
    it = health_.emplace(backup, Health{.deadline = deadline_}).first;
  }
  Health& h = it->second;
  if (h.failing_since == absl::InfinitePast()) h.failing_since = now;
  // Slow, not gone: the next forward gets twice the time.
  const bool timeout = absl::IsDeadlineExceeded(s);
  h.exhausted = !timeout || used >= max_deadline_;
  if (timeout) {
    h.deadline = std::min(max_deadline_, std::max(h.deadline, 2 * used));
  }
}

std::vector<uint32_t> BackupHealth::Lagging(absl::Duration lag, absl::Time now,
                                            const ReplicaView& view) const {
  std::vector<uint32_t> out;
  for (const auto& [backup, h] : health_) {
    if (h.failing_since != absl::InfinitePast() &&
        now - h.failing_since >= lag && h.exhausted && !view.Failed(backup)) {
      out.push_back(backup);
    }
  }
  return out;
}

void BackupHealth::Forget(uint32_t shard, uint32_t self) {
  if (shard == self) {
    health_.clear();
    return;
  }
  health_.erase(shard);
}

}  // namespace internal
}  // namespace ps
