// The hottest rows of a sparse table: each stored row counts its own pushes
// exactly (RowMeta::pushes, one increment on a line the push writes anyway),
// and at Stats time a scan of the rows offers every (id, pushes) to a
// TopHotIds, which keeps the K largest.
//
//   TopHotIds top(10);
//   for (each row) top.Offer(row.id, row.pushes);   // O(1) unless it enters
//   std::vector<HotId> hottest = std::move(top).Take();
//
// Not thread-safe: the caller holds each stripe's lock while it offers that
// stripe's rows.
#ifndef SERVER_SPARSE_INTERNAL_HOT_IDS_H_
#define SERVER_SPARSE_INTERNAL_HOT_IDS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ps {

// One entry of a hottest-ids report: row `id` was pushed `pushes` times
// (exact; see SparseTable::Stats::hottest for what is counted).
struct HotId {
  uint64_t id = 0;
  uint64_t pushes = 0;
};

namespace sparse_internal {

// The report order: more pushes first, ties broken by the lower id, so a
// report is a function of the counts alone.
inline bool Hotter(const HotId& a, const HotId& b) {
  return a.pushes != b.pushes ? a.pushes > b.pushes : a.id < b.id;
}

// Keeps the k hottest of the entries offered (ids distinct).
// Cost: O(1) for an offer that does not enter the top k, O(log k) for one
// that does; O(k) memory.
class TopHotIds {
 public:
  explicit TopHotIds(size_t k) : k_(k) { heap_.reserve(k); }

  void Offer(uint64_t id, uint64_t pushes) {
    const HotId h{id, pushes};
    if (heap_.size() == k_ && (k_ == 0 || !Hotter(h, heap_.front()))) return;
    Enter(h);
  }

  // The kept entries, hottest first.
  std::vector<HotId> Take() &&;

 private:
  void Enter(const HotId& h);

  size_t k_;
  // A heap whose front is the coldest kept entry.
  std::vector<HotId> heap_;
};

}  // namespace sparse_internal
}  // namespace ps

#endif  // SERVER_SPARSE_INTERNAL_HOT_IDS_H_
