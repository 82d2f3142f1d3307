// The CPU backend's embedding-bag loops (private to :cpu_backend). Arguments
// are checked by the caller (arg_checks.h); these only compute, in the order
// Backend::EmbeddingBagForward/Backward fix, so the CUDA kernels give the
// same bits: per output element, 0.0f plus each term in occurrence order,
// then elementwise::PoolBag / BagGradShare.

#ifndef WORKER_BACKEND_CPU_EMBEDDING_LOOPS_H_
#define WORKER_BACKEND_CPU_EMBEDDING_LOOPS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "worker/backend/backend.h"

namespace ps {
namespace cpu_internal {

// Where an occurrence's bag gradient lives, and the bag's size.
struct OccurrenceSource {
  size_t offset;  // into grad_out
  int32_t count;
};

void EmbeddingForwardLoop(bool mean, const EmbeddingBatch& batch, int dim,
                          const float* rows, int bags_per_row, int out_stride,
                          float* out);

// `sources` is scratch (resized to num_indices; reuse it across calls).
void EmbeddingBackwardLoop(bool mean, const EmbeddingBatch& batch, int dim,
                           const float* grad_out, int bags_per_row,
                           int grad_out_stride,
                           std::vector<OccurrenceSource>* sources,
                           float* grad_rows);

}  // namespace cpu_internal
}  // namespace ps

#endif  // WORKER_BACKEND_CPU_EMBEDDING_LOOPS_H_
