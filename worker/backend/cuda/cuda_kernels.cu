// The CUDA backend's small kernels. Grid-stride loops over the shared
// element-wise functions; see cuda_kernels.h for the contracts.

#include <algorithm>

#include "worker/backend/cuda/cuda_kernels.h"

namespace ps {
namespace cuda {
namespace {

constexpr int kThreads = 256;
// Enough blocks to fill any current GPU; grid-stride loops cover the rest.
constexpr size_t kMaxBlocks = 4096;

int Blocks(size_t n) {
  const size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(std::min(std::max<size_t>(blocks, 1), kMaxBlocks));
}

__global__ void BiasAddKernel(size_t n, int cols, const float* bias, float* x,
                              bool relu) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float b = bias[i % cols];
    x[i] = relu ? elementwise::BiasRelu(x[i], b) : x[i] + b;
  }
}

__global__ void ReluKernel(size_t n, const float* x, float* y) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    y[i] = elementwise::Relu(x[i]);
  }
}

__global__ void ReluBackwardKernel(size_t n, const float* y, const float* dy,
                                   float* dx) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dx[i] = elementwise::ReluGrad(y[i], dy[i]);
  }
}

// Grid-stride loops over n outputs, one element per thread.
__global__ void Im2ColKernel(size_t n, ImageShape shape, int kernel,
                             const float* x, float* cols) {
  const int row_len = kernel * kernel * shape.channels;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    cols[i] = elementwise::Im2ColAt(shape, kernel, x, i / row_len,
                                    static_cast<int>(i % row_len));
  }
}

__global__ void Col2ImKernel(size_t n, ImageShape shape, int kernel,
                             const float* cols, float* dx) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dx[i] = elementwise::Col2ImAt(shape, kernel, cols, i);
  }
}

__global__ void MaxPoolKernel(size_t n, ImageShape shape, int pool,
                              const float* x, float* y, int32_t* argmax) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    y[i] = elementwise::MaxPoolAt(shape, pool, x, i, argmax + i);
  }
}

__global__ void MaxPoolBackwardKernel(size_t n, ImageShape shape, int pool,
                                      const int32_t* argmax, const float* dy,
                                      float* dx) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dx[i] = elementwise::MaxPoolGradAt(shape, pool, argmax, dy, i);
  }
}

__global__ void XentRowsKernel(int rows, int classes, const float* logits,
                               const int32_t* labels, float grad_scale,
                               float* grad, float* row_loss,
                               int32_t* row_correct) {
  for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows;
       r += gridDim.x * blockDim.x) {
    const size_t offset = static_cast<size_t>(r) * classes;
    const elementwise::RowXent x = elementwise::SoftmaxXentRow(
        logits + offset, classes, labels[r], grad_scale,
        grad == nullptr ? nullptr : grad + offset);
    row_loss[r] = x.loss;
    row_correct[r] = x.correct;
  }
}

// One block of kThreads: thread t sums rows t, t + kThreads, ... in double,
// then a fixed-shape tree combines the partials: the same order every run.
__global__ void XentReduceKernel(int rows, const float* row_loss,
                                 const int32_t* row_correct, XentStats* stats) {
  __shared__ double loss[kThreads];
  __shared__ long long correct[kThreads];
  double l = 0.0;
  long long c = 0;
  for (int r = threadIdx.x; r < rows; r += kThreads) {
    l += row_loss[r];
    c += row_correct[r];
  }
  loss[threadIdx.x] = l;
  correct[threadIdx.x] = c;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      loss[threadIdx.x] += loss[threadIdx.x + stride];
      correct[threadIdx.x] += correct[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    stats->loss_sum = loss[0];
    stats->correct = correct[0];
  }
}

// One thread per column; rows summed in order, like the CPU backend.
__global__ void ColumnSumsKernel(int rows, int cols, float alpha,
                                 const float* x, float beta, float* y) {
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols;
       c += gridDim.x * blockDim.x) {
    float sum = 0.0f;
    for (int r = 0; r < rows; ++r) sum += x[static_cast<size_t>(r) * cols + c];
    y[c] = elementwise::AlphaBeta(alpha, sum, beta, y[c]);
  }
}

__global__ void AxpyKernel(size_t n, float alpha, const float* x, float* y) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    y[i] = elementwise::Axpy(alpha, x[i], y[i]);
  }
}

__global__ void ScaleKernel(size_t n, float alpha, float* x) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    x[i] *= alpha;
  }
}

__global__ void FillKernel(size_t n, float value, float* x) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    x[i] = value;
  }
}

// The last b in [0, n) with offsets[b] <= p: the CSR segment holding p (the
// last of several equal offsets, so empty segments are skipped). Stays in
// [0, n) for any contents of offsets.
__device__ int SegmentOf(const int32_t* offsets, int n, int p) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (offsets[mid] <= p) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// 0 when offsets[0..n] is 0-based, non-decreasing and ends at `end`,
// checking element i only (the grid covers all i).
__device__ int32_t CheckCsrElement(const int32_t* offsets, int n, int end,
                                   int i, int32_t bit) {
  if (i > n) return 0;
  if (i == 0 && offsets[0] != 0) return bit;
  if (i == n && offsets[n] != end) return bit;
  if (i > 0 && offsets[i] < offsets[i - 1]) return bit;
  return 0;
}

__global__ void EmbeddingBagCheckKernel(int num_bags, int num_rows,
                                        int num_indices, const int32_t* offsets,
                                        const int32_t* indices,
                                        const int32_t* row_offsets,
                                        const int32_t* row_occurrences,
                                        bool inverse, int32_t* flags) {
  // Elements 0..max count inclusive (offsets have count + 1); 64-bit so the
  // loop cannot overflow at INT32_MAX.
  const long long n =
      static_cast<long long>(max(max(num_bags, num_rows), num_indices)) + 1;
  int32_t bad = 0;
  for (long long j =
           blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
       j < n; j += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(j);  // <= every count used below
    if (num_bags > 0) {
      bad |= CheckCsrElement(offsets, num_bags, num_indices, i,
                             kEmbeddingBadOffsets);
    }
    if (i < num_indices && (indices[i] < 0 || indices[i] >= num_rows)) {
      bad |= kEmbeddingBadIndex;
    }
    // num_rows == 0 with occurrences already fails the index check.
    if (!inverse || num_rows == 0) continue;
    bad |= CheckCsrElement(row_offsets, num_rows, num_indices, i,
                           kEmbeddingBadRowOffsets);
    if (i >= num_indices) continue;
    const int32_t p = row_occurrences[i];
    if (p < 0 || p >= num_indices) {
      bad |= kEmbeddingBadRowOccurrences;
      continue;
    }
    const int u = SegmentOf(row_offsets, num_rows, i);
    if (indices[p] != u ||
        (i > 0 && i > row_offsets[u] && row_occurrences[i - 1] >= p)) {
      bad |= kEmbeddingBadRowOccurrences;
    }
  }
  if (bad != 0) atomicOr(flags, bad);
}

__global__ void EmbeddingBagForwardKernel(bool mean, int num_bags, int dim,
                                          int team, const int32_t* offsets,
                                          const int32_t* indices,
                                          const float* rows, int bags_per_row,
                                          int out_stride, float* out,
                                          const int32_t* flags) {
  if (*flags != 0) return;
  const size_t thread =
      blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const int lane = static_cast<int>(thread % team);
  const size_t teams = static_cast<size_t>(gridDim.x) * blockDim.x / team;
  for (size_t bag = thread / team; bag < static_cast<size_t>(num_bags);
       bag += teams) {
    const int begin = offsets[bag];
    const int end = offsets[bag + 1];
    float* dst =
        out + elementwise::BagOutputOffset(bag, bags_per_row, out_stride, dim);
    for (int c = lane; c < dim; c += team) {
      float sum = 0.0f;
      for (int p = begin; p < end; ++p) {
        sum += rows[static_cast<size_t>(indices[p]) * dim + c];
      }
      dst[c] = elementwise::PoolBag(sum, end - begin, mean);
    }
  }
}

__global__ void EmbeddingBagBackwardKernel(
    bool mean, int num_bags, int num_rows, int dim, int team,
    const int32_t* offsets, const int32_t* row_offsets,
    const int32_t* row_occurrences, const float* grad_out, int bags_per_row,
    int grad_out_stride, float* grad_rows, const int32_t* flags) {
  if (*flags != 0) return;
  const size_t thread =
      blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const int lane = static_cast<int>(thread % team);
  const size_t teams = static_cast<size_t>(gridDim.x) * blockDim.x / team;
  for (size_t u = thread / team; u < static_cast<size_t>(num_rows);
       u += teams) {
    const int begin = row_offsets[u];
    const int end = row_offsets[u + 1];
    float* dst = grad_rows + u * dim;
    for (int c = lane; c < dim; c += team) {
      float sum = 0.0f;
      for (int k = begin; k < end; ++k) {
        const int bag = SegmentOf(offsets, num_bags, row_occurrences[k]);
        const int count = offsets[bag + 1] - offsets[bag];
        const float g = grad_out[elementwise::BagOutputOffset(
                                     bag, bags_per_row, grad_out_stride, dim) +
                                 c];
        sum += elementwise::BagGradShare(g, count, mean);
      }
      dst[c] = sum;
    }
  }
}

// Threads per bag (or row): dim rounded up to a power of two, at most a warp,
// so a warp's lanes read consecutive floats of one or more rows.
int TeamSize(int dim) {
  int team = 1;
  while (team < dim && team < 32) team *= 2;
  return team;
}

// Blocks for `items` teams of `team` threads (kThreads is a multiple of any
// team size, so teams never straddle blocks).
int TeamBlocks(size_t items, int team) {
  return Blocks(items * static_cast<size_t>(team));
}

}  // namespace

const char* EmbeddingErrorMessage(int32_t flags) {
  if (flags & kEmbeddingBadOffsets) {
    return "EmbeddingBag: offsets are not 0-based, non-decreasing and ending "
           "at num_indices";
  }
  if (flags & kEmbeddingBadIndex) {
    return "EmbeddingBag: an index is outside [0, num_rows)";
  }
  if (flags & kEmbeddingBadRowOffsets) {
    return "EmbeddingBagBackward: row_offsets are not 0-based, non-decreasing "
           "and ending at num_indices";
  }
  if (flags & kEmbeddingBadRowOccurrences) {
    return "EmbeddingBagBackward: row_occurrences are not the ascending "
           "inverse of indices";
  }
  return "EmbeddingBag: unknown check failure";
}

cudaError_t LaunchEmbeddingBagCheck(
    cudaStream_t stream, int num_bags, int num_rows, int num_indices,
    const int32_t* offsets, const int32_t* indices, const int32_t* row_offsets,
    const int32_t* row_occurrences, bool inverse, int32_t* flags) {
  const size_t n =
      static_cast<size_t>(std::max(std::max(num_bags, num_rows), num_indices)) +
      1;
  EmbeddingBagCheckKernel<<<Blocks(n), kThreads, 0, stream>>>(
      num_bags, num_rows, num_indices, offsets, indices, row_offsets,
      row_occurrences, inverse, flags);
  return cudaGetLastError();
}

cudaError_t LaunchEmbeddingBagForward(cudaStream_t stream, bool mean,
                                      int num_bags, int dim,
                                      const int32_t* offsets,
                                      const int32_t* indices, const float* rows,
                                      int bags_per_row, int out_stride,
                                      float* out, const int32_t* flags) {
  if (num_bags == 0) return cudaSuccess;
  const int team = TeamSize(dim);
  EmbeddingBagForwardKernel<<<TeamBlocks(num_bags, team), kThreads, 0,
                              stream>>>(mean, num_bags, dim, team, offsets,
                                        indices, rows, bags_per_row, out_stride,
                                        out, flags);
  return cudaGetLastError();
}

cudaError_t LaunchEmbeddingBagBackward(
    cudaStream_t stream, bool mean, int num_bags, int num_rows, int dim,
    const int32_t* offsets, const int32_t* row_offsets,
    const int32_t* row_occurrences, const float* grad_out, int bags_per_row,
    int grad_out_stride, float* grad_rows, const int32_t* flags) {
  if (num_rows == 0) return cudaSuccess;
  const int team = TeamSize(dim);
  EmbeddingBagBackwardKernel<<<TeamBlocks(num_rows, team), kThreads, 0,
                               stream>>>(mean, num_bags, num_rows, dim, team,
                                         offsets, row_offsets, row_occurrences,
                                         grad_out, bags_per_row,
                                         grad_out_stride, grad_rows, flags);
  return cudaGetLastError();
}

cudaError_t LaunchBiasAdd(cudaStream_t stream, int rows, int cols,
                          const float* bias, float* x, bool relu) {
  const size_t n = static_cast<size_t>(rows) * cols;
  if (n == 0) return cudaSuccess;
  BiasAddKernel<<<Blocks(n), kThreads, 0, stream>>>(n, cols, bias, x, relu);
  return cudaGetLastError();
}

cudaError_t LaunchRelu(cudaStream_t stream, size_t n, const float* x,
                       float* y) {
  if (n == 0) return cudaSuccess;
  ReluKernel<<<Blocks(n), kThreads, 0, stream>>>(n, x, y);
  return cudaGetLastError();
}

cudaError_t LaunchReluBackward(cudaStream_t stream, size_t n, const float* y,
                               const float* dy, float* dx) {
  if (n == 0) return cudaSuccess;
  ReluBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(n, y, dy, dx);
  return cudaGetLastError();
}

size_t Pixels(const ImageShape& s) {
  return static_cast<size_t>(s.batch) * s.height * s.width;
}

cudaError_t LaunchIm2Col(cudaStream_t stream, const ImageShape& shape,
                         int kernel, const float* x, float* cols) {
  const size_t n =
      Pixels(shape) * kernel * kernel * static_cast<size_t>(shape.channels);
  if (n == 0) return cudaSuccess;
  Im2ColKernel<<<Blocks(n), kThreads, 0, stream>>>(n, shape, kernel, x, cols);
  return cudaGetLastError();
}

cudaError_t LaunchCol2Im(cudaStream_t stream, const ImageShape& shape,
                         int kernel, const float* cols, float* dx) {
  const size_t n = Pixels(shape) * shape.channels;
  if (n == 0) return cudaSuccess;
  Col2ImKernel<<<Blocks(n), kThreads, 0, stream>>>(n, shape, kernel, cols, dx);
  return cudaGetLastError();
}

cudaError_t LaunchMaxPool(cudaStream_t stream, const ImageShape& shape,
                          int pool, const float* x, float* y, int32_t* argmax) {
  const size_t n = static_cast<size_t>(shape.batch) * (shape.height / pool) *
                   (shape.width / pool) * shape.channels;
  if (n == 0) return cudaSuccess;
  MaxPoolKernel<<<Blocks(n), kThreads, 0, stream>>>(n, shape, pool, x, y,
                                                    argmax);
  return cudaGetLastError();
}

cudaError_t LaunchMaxPoolBackward(cudaStream_t stream, const ImageShape& shape,
                                  int pool, const int32_t* argmax,
                                  const float* dy, float* dx) {
  const size_t n = Pixels(shape) * shape.channels;
  if (n == 0) return cudaSuccess;
  MaxPoolBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(n, shape, pool,
                                                            argmax, dy, dx);
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxXent(cudaStream_t stream, int rows, int classes,
                              const float* logits, const int32_t* labels,
                              float grad_scale, float* grad, float* row_loss,
                              int32_t* row_correct, XentStats* stats) {
  if (rows > 0) {
    XentRowsKernel<<<Blocks(rows), kThreads, 0, stream>>>(
        rows, classes, logits, labels, grad_scale, grad, row_loss, row_correct);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  // Also for rows == 0, so *stats is always written.
  XentReduceKernel<<<1, kThreads, 0, stream>>>(rows, row_loss, row_correct,
                                               stats);
  return cudaGetLastError();
}

cudaError_t LaunchColumnSums(cudaStream_t stream, int rows, int cols,
                             float alpha, const float* x, float beta,
                             float* y) {
  if (cols == 0) return cudaSuccess;
  ColumnSumsKernel<<<Blocks(cols), kThreads, 0, stream>>>(rows, cols, alpha, x,
                                                          beta, y);
  return cudaGetLastError();
}

cudaError_t LaunchAxpy(cudaStream_t stream, size_t n, float alpha,
                       const float* x, float* y) {
  if (n == 0) return cudaSuccess;
  AxpyKernel<<<Blocks(n), kThreads, 0, stream>>>(n, alpha, x, y);
  return cudaGetLastError();
}

cudaError_t LaunchScale(cudaStream_t stream, size_t n, float alpha, float* x) {
  if (n == 0) return cudaSuccess;
  ScaleKernel<<<Blocks(n), kThreads, 0, stream>>>(n, alpha, x);
  return cudaGetLastError();
}

cudaError_t LaunchFill(cudaStream_t stream, size_t n, float value, float* x) {
  if (n == 0) return cudaSuccess;
  FillKernel<<<Blocks(n), kThreads, 0, stream>>>(n, value, x);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace ps
