#include "worker/backend/cpu/embedding_loops.h"

#include <cstring>
#include <type_traits>

#include "worker/backend/elementwise.h"

namespace ps {
namespace cpu_internal {
namespace {

// Row helpers: restrict on parameters (which GCC keeps through inlining)
// lets it vectorise the fixed-width loops; on block-scope pointers it would
// not. `dim` is a compile-time constant after inlining for kDim > 0.
inline void ZeroRow(int dim, float* __restrict dst) {
  for (int c = 0; c < dim; ++c) dst[c] = 0.0f;
}

inline void AddRow(int dim, const float* __restrict src,
                   float* __restrict dst) {
  for (int c = 0; c < dim; ++c) dst[c] += src[c];
}

inline void AddRowShare(int dim, const float* __restrict src, int count,
                        float* __restrict dst) {
  for (int c = 0; c < dim; ++c) {
    dst[c] += elementwise::BagGradShare(src[c], count, /*mean=*/true);
  }
}

inline void PoolRow(int dim, int count, float* __restrict dst) {
  for (int c = 0; c < dim; ++c) {
    dst[c] = elementwise::PoolBag(dst[c], count, /*mean=*/true);
  }
}

// A fixed-width row (kDim > 0) as chunks of a GCC vector type, so its sums
// are whole-vector adds held in registers (plain loops over a constant
// width get split into scalars by GCC's SLP pass). Lane-wise IEEE adds and
// divides: the same bits as the scalar order per element.
typedef float Floats4 __attribute__((vector_size(4 * sizeof(float))));
typedef float Floats8 __attribute__((vector_size(8 * sizeof(float))));
typedef float Floats16 __attribute__((vector_size(16 * sizeof(float))));

template <int kDim>
struct FixedRow {
  static_assert(kDim % 4 == 0, "widths are whole 4-float chunks");
  static constexpr int kLanes = kDim < 16 ? kDim : 16;
  static constexpr int kChunks = kDim / kLanes;
  // vector_size cannot depend on a template parameter: pick a fixed type.
  using Chunk =
      std::conditional_t<kLanes == 16, Floats16,
                         std::conditional_t<kLanes == 8, Floats8, Floats4>>;

  Chunk v[kChunks] = {};

  void Add(const float* src) {
    for (int j = 0; j < kChunks; ++j) {
      Chunk x;
      std::memcpy(&x, src + j * kLanes, sizeof(x));
      v[j] += x;
    }
  }
  // Adds src / count lane by lane (BagGradShare for the mean).
  void AddShare(const float* src, int count) {
    Chunk divisor;
    for (int i = 0; i < kLanes; ++i) divisor[i] = static_cast<float>(count);
    for (int j = 0; j < kChunks; ++j) {
      Chunk x;
      std::memcpy(&x, src + j * kLanes, sizeof(x));
      v[j] += x / divisor;
    }
  }
  void Store(float* dst) const { std::memcpy(dst, v, sizeof(v)); }
};

// kDim > 0: a compile-time width (FixedRow); kDim == 0: any width, summed
// in place in the output row.
template <int kDim>
void Forward(bool mean, const EmbeddingBatch& b, int runtime_dim,
             const float* rows, int bags_per_row, int stride, float* out) {
  const int dim = kDim > 0 ? kDim : runtime_dim;
  int column = 0;  // bag % bags_per_row, without a division per bag
  float* row_start = out;
  for (int bag = 0; bag < b.num_bags; ++bag) {
    float* dst = row_start + static_cast<size_t>(column) * dim;
    const int begin = b.offsets[bag];
    const int end = b.offsets[bag + 1];
    if constexpr (kDim > 0) {
      FixedRow<kDim> sum;
      for (int p = begin; p < end; ++p) {
        sum.Add(rows + static_cast<size_t>(b.indices[p]) * kDim);
      }
      sum.Store(dst);
    } else {
      ZeroRow(dim, dst);
      for (int p = begin; p < end; ++p) {
        AddRow(dim, rows + static_cast<size_t>(b.indices[p]) * dim, dst);
      }
    }
    if (mean) PoolRow(dim, end - begin, dst);
    if (++column == bags_per_row) {
      column = 0;
      row_start += stride;
    }
  }
}

// How many occurrences ahead Backward prefetches its random gradient reads.
constexpr int kPrefetchDistance = 4;

template <int kDim>
void Backward(bool mean, const EmbeddingBatch& b, int runtime_dim,
              const float* grad_out, const OccurrenceSource* sources,
              float* grad_rows) {
  const int dim = kDim > 0 ? kDim : runtime_dim;
  const int32_t* occurrences = b.row_occurrences;
  for (int u = 0; u < b.num_rows; ++u) {
    float* dst = grad_rows + static_cast<size_t>(u) * dim;
    [[maybe_unused]] FixedRow<(kDim > 0 ? kDim : 4)> sum;
    if constexpr (kDim == 0) ZeroRow(dim, dst);
    const int end = b.row_offsets[u + 1];
    for (int k = b.row_offsets[u]; k < end; ++k) {
      // Rows run consecutively through row_occurrences, so look ahead
      // across row boundaries.
      if (k + kPrefetchDistance < b.num_indices) {
        __builtin_prefetch(grad_out +
                           sources[occurrences[k + kPrefetchDistance]].offset);
      }
      const OccurrenceSource s = sources[occurrences[k]];
      if constexpr (kDim > 0) {
        if (mean) {
          sum.AddShare(grad_out + s.offset, s.count);
        } else {
          sum.Add(grad_out + s.offset);
        }
      } else if (mean) {
        AddRowShare(dim, grad_out + s.offset, s.count, dst);
      } else {
        AddRow(dim, grad_out + s.offset, dst);
      }
    }
    if constexpr (kDim > 0) sum.Store(dst);
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
