// Test helpers for Backend::EmbeddingBagForward/Backward: a host-side batch
// that owns its arrays (the row CSR derived from the indices), shared by the
// CPU, deferred and CUDA backend tests.
//
//   HostBags bags({0, 2, 3}, {1, 0, 1});  // offsets, indices
//   EmbeddingBatch b = bags.Batch(/*num_rows=*/2);

#ifndef WORKER_BACKEND_TESTING_EMBEDDING_BAG_TEST_UTIL_H_
#define WORKER_BACKEND_TESTING_EMBEDDING_BAG_TEST_UTIL_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "worker/backend/backend.h"

namespace ps {

struct HostBags {
  // Derives the row CSR for rows [0, num_rows) from `indices`; indices
  // outside that range are left out of it.
  HostBags(std::vector<int32_t> offsets_in, std::vector<int32_t> indices_in,
           int num_rows_in)
      : num_rows(num_rows_in),
        offsets(std::move(offsets_in)),
        indices(std::move(indices_in)) {
    std::vector<std::vector<int32_t>> per_row(num_rows);
    for (size_t p = 0; p < indices.size(); ++p) {
      if (indices[p] >= 0 && indices[p] < num_rows) {
        per_row[indices[p]].push_back(static_cast<int32_t>(p));
      }
    }
    row_offsets.push_back(0);
    for (const std::vector<int32_t>& r : per_row) {
      row_occurrences.insert(row_occurrences.end(), r.begin(), r.end());
      row_offsets.push_back(static_cast<int32_t>(row_occurrences.size()));
    }
  }

  int num_bags() const { return static_cast<int>(offsets.size()) - 1; }

  // A batch over these host arrays.
  EmbeddingBatch Batch() const {
    EmbeddingBatch b;
    b.num_bags = num_bags();
    b.num_rows = num_rows;
    b.num_indices = static_cast<int>(indices.size());
    b.offsets = offsets.data();
    b.indices = indices.data();
    b.row_offsets = row_offsets.data();
    b.row_occurrences = row_occurrences.data();
    return b;
  }

  int num_rows;
  std::vector<int32_t> offsets;
  std::vector<int32_t> indices;
  std::vector<int32_t> row_offsets;
  std::vector<int32_t> row_occurrences;
};

}  // namespace ps

#endif  // WORKER_BACKEND_TESTING_EMBEDDING_BAG_TEST_UTIL_H_
