#include "server/sparse/internal/hot_ids.h"

#include <algorithm>

namespace ps {
namespace sparse_internal {

void HotIds::Add(uint64_t id) {
  if (k_ == 0) return;
  size_t min_at = 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].id == id) {
      ++entries_[i].count;
      return;
    }
    if (entries_[i].count < entries_[min_at].count) min_at = i;
  }
  if (entries_.size() < k_) {
    entries_.push_back(HotId{id, 1, 0});
    return;
  }
  HotId& victim = entries_[min_at];
  victim = HotId{id, victim.count + 1, victim.count};
}

std::vector<HotId> MergeTop(std::vector<HotId> all, size_t k) {
  std::sort(all.begin(), all.end(), [](const HotId& a, const HotId& b) {
    return a.count != b.count ? a.count > b.count : a.id < b.id;
  });
  if (all.size() > k) all.resize(k);
  return all;
}

std::vector<HotId> HotIds::Top() const { return MergeTop(entries_, k_); }

}  // namespace sparse_internal
}  // namespace ps
