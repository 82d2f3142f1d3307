#include "server/sparse/internal/batch.h"

#include <algorithm>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "server/sparse/internal/row_index.h"

namespace ps {
namespace sparse_internal {

StripeGroups GroupByStripe(absl::Span<const uint32_t> stripe_of,
                           uint32_t num_stripes) {
  StripeGroups g;
  g.begin.assign(num_stripes + 1, 0);
  for (uint32_t s : stripe_of) ++g.begin[s + 1];
  for (uint32_t s = 0; s < num_stripes; ++s) g.begin[s + 1] += g.begin[s];
  std::vector<uint32_t> next(g.begin.begin(), g.begin.end() - 1);
  g.order.resize(stripe_of.size());
  for (uint32_t i = 0; i < stripe_of.size(); ++i) {
    g.order[next[stripe_of[i]]++] = i;
  }
  return g;
}

MergedPush MergePush(absl::Span<const uint64_t> ids,
                     absl::Span<const float> grads, uint32_t dim,
                     uint32_t stripe_mask) {
  // unique_of[i]: the index of ids[i] among the unique ids (first-occurrence
  // order).
  std::vector<uint32_t> unique_of(ids.size());
  std::vector<uint64_t> unique_ids;
  unique_ids.reserve(ids.size());
  absl::flat_hash_map<uint64_t, uint32_t> first;
  first.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    auto [it, inserted] =
        first.try_emplace(ids[i], static_cast<uint32_t>(unique_ids.size()));
    if (inserted) unique_ids.push_back(ids[i]);
    unique_of[i] = it->second;
  }
  std::vector<uint64_t> hashes(unique_ids.size());
  std::vector<uint32_t> stripe_of(unique_ids.size());
  for (size_t u = 0; u < unique_ids.size(); ++u) {
    hashes[u] = RowHash(unique_ids[u]);
    stripe_of[u] = static_cast<uint32_t>(hashes[u]) & stripe_mask;
  }
  StripeGroups groups = GroupByStripe(stripe_of, stripe_mask + 1);
  std::vector<uint32_t> row_of(unique_ids.size());
  MergedPush m;
  m.ids.resize(unique_ids.size());
  m.hashes.resize(unique_ids.size());
  for (uint32_t r = 0; r < groups.order.size(); ++r) {
    const uint32_t u = groups.order[r];
    row_of[u] = r;
    m.ids[r] = unique_ids[u];
    m.hashes[r] = hashes[u];
  }
  m.begin = std::move(groups.begin);
  // Not zeroed: each row's first occurrence is copied in, later ones added.
  m.grads.reset(new float[unique_ids.size() * size_t{dim}]);
  // Per unique id: 0 not seen yet, 1 seen once, 2 summed.
  std::vector<uint8_t> seen(unique_ids.size(), 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t u = unique_of[i];
    float* dst = m.grads.get() + size_t{row_of[u]} * dim;
    const float* src = grads.data() + i * dim;
    if (seen[u] == 0) {
      std::memcpy(dst, src, dim * sizeof(float));
      seen[u] = 1;
      continue;
    }
    for (uint32_t e = 0; e < dim; ++e) dst[e] += src[e];
    if (seen[u] == 1) m.summed.push_back(row_of[u]);
    seen[u] = 2;
  }
  std::sort(m.summed.begin(), m.summed.end());
  return m;
}

}  // namespace sparse_internal
}  // namespace ps
