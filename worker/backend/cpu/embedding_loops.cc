#include "worker/backend/cpu/embedding_loops.h"

#include "worker/backend/elementwise.h"

namespace ps {
namespace cpu_internal {
namespace {

// kDim > 0: the width is a compile-time constant, so a bag's sums stay in
// registers; kDim == 0: any width, summed in place in the output.
template <int kDim>
void Forward(bool mean, const EmbeddingBatch& b, int dim, const float* rows,
             int bags_per_row, int stride, float* out) {
  int column = 0;  // bag % bags_per_row, without a division per bag
  float* row_start = out;
  for (int bag = 0; bag < b.num_bags; ++bag) {
    float* __restrict dst = row_start + static_cast<size_t>(column) * dim;
    const int begin = b.offsets[bag];
    const int end = b.offsets[bag + 1];
    if constexpr (kDim > 0) {
      float sum[kDim] = {};
      for (int p = begin; p < end; ++p) {
        const float* __restrict src =
            rows + static_cast<size_t>(b.indices[p]) * kDim;
        for (int c = 0; c < kDim; ++c) sum[c] += src[c];
      }
      for (int c = 0; c < kDim; ++c) {
        dst[c] = elementwise::PoolBag(sum[c], end - begin, mean);
      }
    } else {
      for (int c = 0; c < dim; ++c) dst[c] = 0.0f;
      for (int p = begin; p < end; ++p) {
        const float* __restrict src =
            rows + static_cast<size_t>(b.indices[p]) * dim;
        for (int c = 0; c < dim; ++c) dst[c] += src[c];
      }
      for (int c = 0; c < dim; ++c) {
        dst[c] = elementwise::PoolBag(dst[c], end - begin, mean);
      }
    }
    if (++column == bags_per_row) {
      column = 0;
      row_start += stride;
    }
  }
}

template <int kDim>
void Backward(bool mean, const EmbeddingBatch& b, int dim,
              const float* grad_out, const OccurrenceSource* sources,
              float* grad_rows) {
  constexpr int kMax = kDim > 0 ? kDim : 1;
  for (int u = 0; u < b.num_rows; ++u) {
    float* dst = grad_rows + static_cast<size_t>(u) * dim;
    float fixed[kMax] = {};
    float* __restrict sum = kDim > 0 ? fixed : dst;
    const int width = kDim > 0 ? kDim : dim;
    if (kDim == 0) {
      for (int c = 0; c < width; ++c) sum[c] = 0.0f;
    }
    for (int k = b.row_offsets[u]; k < b.row_offsets[u + 1]; ++k) {
      const OccurrenceSource s = sources[b.row_occurrences[k]];
      const float* __restrict src = grad_out + s.offset;
      if (mean) {
        for (int c = 0; c < width; ++c) {
          sum[c] += elementwise::BagGradShare(src[c], s.count, /*mean=*/true);
        }
      } else {
        for (int c = 0; c < width; ++c) sum[c] += src[c];
      }
    }
    if (kDim > 0) {
      for (int c = 0; c < width; ++c) dst[c] = sum[c];
    }
  }
}

// Calls F<kDim> for the common widths, F<0> otherwise.
template <template <int> class F, typename... Args>
void DispatchDim(int dim, Args&&... args) {
  switch (dim) {
    case 4:
      return F<4>()(args...);
    case 8:
      return F<8>()(args...);
    case 16:
      return F<16>()(args...);
    case 32:
      return F<32>()(args...);
    case 64:
      return F<64>()(args...);
    default:
      return F<0>()(args...);
  }
}

template <int kDim>
struct ForwardFn {
  template <typename... Args>
  void operator()(Args... args) const {
    Forward<kDim>(args...);
  }
};

template <int kDim>
struct BackwardFn {
  template <typename... Args>
  void operator()(Args... args) const {
    Backward<kDim>(args...);
  }
};

}  // namespace

void EmbeddingForwardLoop(bool mean, const EmbeddingBatch& batch, int dim,
                          const float* rows, int bags_per_row, int out_stride,
                          float* out) {
  DispatchDim<ForwardFn>(dim, mean, batch, dim, rows, bags_per_row, out_stride,
                         out);
}

void EmbeddingBackwardLoop(bool mean, const EmbeddingBatch& batch, int dim,
                           const float* grad_out, int bags_per_row,
                           int grad_out_stride,
                           std::vector<OccurrenceSource>* sources,
                           float* grad_rows) {
  // Each occurrence's gradient source and bag size, walking the bags with
  // (row, column) counters instead of a division per occurrence.
  sources->resize(static_cast<size_t>(batch.num_indices));
  OccurrenceSource* s = sources->data();
  size_t row_start = 0;
  int column = 0;
  for (int bag = 0; bag < batch.num_bags; ++bag) {
    const int begin = batch.offsets[bag];
    const int end = batch.offsets[bag + 1];
    const size_t offset = row_start + static_cast<size_t>(column) * dim;
    for (int p = begin; p < end; ++p)
      s[p] = OccurrenceSource{offset, end - begin};
    if (++column == bags_per_row) {
      column = 0;
      row_start += static_cast<size_t>(grad_out_stride);
    }
  }
  DispatchDim<BackwardFn>(dim, mean, batch, dim, grad_out,
                          static_cast<const OccurrenceSource*>(s), grad_rows);
}

}  // namespace cpu_internal
}  // namespace ps
