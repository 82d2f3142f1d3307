// A bounded space-saving sketch (Metwally et al. 2005) of the ids pushed most
// often: K counters; an id without one takes the smallest counter's place
// with that count + 1, so any id pushed more than total/K times is held, and
// a held id's count overestimates its true count by at most `error`.
//
//   HotIds hot(10);
//   hot.Add(id);                      // once per push of a row
//   std::vector<HotId> top = hot.Top();
//
// Cost O(K) per Add (a linear scan; K is small, 10 by default).
// Not thread-safe: the stripe's mutex guards it.
#ifndef SERVER_SPARSE_INTERNAL_HOT_IDS_H_
#define SERVER_SPARSE_INTERNAL_HOT_IDS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ps {

// One entry of a hottest-ids report: `count` pushes counted for `id`, of
// which at most `error` may belong to ids it replaced in the sketch.
struct HotId {
  uint64_t id = 0;
  uint64_t count = 0;
  uint64_t error = 0;
};

namespace sparse_internal {

class HotIds {
 public:
  explicit HotIds(size_t k) : k_(k) { entries_.reserve(k); }

  void Add(uint64_t id);
  // The held entries, highest count first (ties: lower id first).
  std::vector<HotId> Top() const;
  size_t bytes() const { return entries_.capacity() * sizeof(HotId); }

 private:
  size_t k_;
  std::vector<HotId> entries_;
};

// Merges per-stripe reports (disjoint id sets) into the top `k`.
std::vector<HotId> MergeTop(std::vector<HotId> all, size_t k);

}  // namespace sparse_internal
}  // namespace ps

#endif  // SERVER_SPARSE_INTERNAL_HOT_IDS_H_
