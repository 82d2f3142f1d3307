// Request preparation for SparseTable: grouping ids by stripe and merging
// duplicate ids of a push. Pure functions, thread-safe.
#ifndef SERVER_SPARSE_INTERNAL_BATCH_H_
#define SERVER_SPARSE_INTERNAL_BATCH_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/types/span.h"

namespace ps {
namespace sparse_internal {

// Positions [0, stripe_of.size()) grouped by stripe, stable:
// order[begin[s], begin[s + 1]) are the positions in stripe s, ascending.
struct StripeGroups {
  std::vector<uint32_t> order;
  std::vector<uint32_t> begin;  // num_stripes + 1 entries
};
StripeGroups GroupByStripe(absl::Span<const uint32_t> stripe_of,
                           uint32_t num_stripes);

// A push with duplicates merged and rows grouped by stripe: row r (in
// [begin[s], begin[s + 1]) for stripe s) is id ids[r] with hash hashes[r]
// and gradient grads[r * dim, (r + 1) * dim), the sum of every occurrence's
// gradient in request order. Within a stripe, rows keep first-occurrence
// order. `summed` lists the rows (ascending) whose gradient is a sum of two
// or more occurrences: the only ones whose values are not the request's.
struct MergedPush {
  std::vector<uint64_t> ids;
  std::vector<uint64_t> hashes;
  std::unique_ptr<float[]> grads;  // ids.size() x dim, every float written
  std::vector<uint32_t> begin;
  std::vector<uint32_t> summed;
};
// stripe_mask: num_stripes - 1 (a power of two minus one).
MergedPush MergePush(absl::Span<const uint64_t> ids,
                     absl::Span<const float> grads, uint32_t dim,
                     uint32_t stripe_mask);

}  // namespace sparse_internal
}  // namespace ps

#endif  // SERVER_SPARSE_INTERNAL_BATCH_H_
