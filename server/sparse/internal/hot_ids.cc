#include "server/sparse/internal/hot_ids.h"

#include <algorithm>
#include <utility>

namespace ps {
namespace sparse_internal {

void TopHotIds::Enter(const HotId& h) {
  // Hotter as the heap's "less": the front is the entry nothing is colder
  // than.
  if (heap_.size() == k_) {
    std::pop_heap(heap_.begin(), heap_.end(), Hotter);
    heap_.back() = h;
  } else {
    heap_.push_back(h);
  }
  std::push_heap(heap_.begin(), heap_.end(), Hotter);
}

std::vector<HotId> TopHotIds::Take() && {
  std::sort(heap_.begin(), heap_.end(), Hotter);
  return std::move(heap_);
}

}  // namespace sparse_internal
}  // namespace ps
