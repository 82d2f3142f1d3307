// Launchers for the CUDA backend's small kernels (cuda_kernels.cu). Each
// enqueues on `stream` and returns the launch error (cudaSuccess when the
// launch was accepted). The per-element math comes from
// worker/backend/elementwise.h, shared with the CPU backend.
//
// Plain C++ + CUDA runtime only, so nvcc compiles the .cu file without the
// project's other dependencies.
//
//   cudaError_t e = ps::cuda::LaunchBiasAdd(stream, rows, cols, bias, x,
//                                           /*relu=*/true);

#ifndef WORKER_BACKEND_CUDA_CUDA_KERNELS_H_
#define WORKER_BACKEND_CUDA_CUDA_KERNELS_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "worker/backend/elementwise.h"

namespace ps {
namespace cuda {

// x[r][c] += bias[c], then max(., 0) when relu.
cudaError_t LaunchBiasAdd(cudaStream_t stream, int rows, int cols,
                          const float* bias, float* x, bool relu);

// y = max(x, 0).
cudaError_t LaunchRelu(cudaStream_t stream, size_t n, const float* x, float* y);

// dx = y > 0 ? dy : 0.
cudaError_t LaunchReluBackward(cudaStream_t stream, size_t n, const float* y,
                               const float* dy, float* dx);

// Softmax cross-entropy: one thread per row writes the gradient row and the
// row's loss/correct into row_loss/row_correct (scratch of >= rows
// elements), then one block sums them in a fixed order into *stats, so the
// result is deterministic. grad may be null.
cudaError_t LaunchSoftmaxXent(cudaStream_t stream, int rows, int classes,
                              const float* logits, const int32_t* labels,
                              float grad_scale, float* grad, float* row_loss,
                              int32_t* row_correct, XentStats* stats);

// y[c] = alpha * sum_r x[r][c] + beta * y[c], rows summed in order.
cudaError_t LaunchColumnSums(cudaStream_t stream, int rows, int cols,
                             float alpha, const float* x, float beta, float* y);

// Backend::Im2Col / Col2Im / MaxPool / MaxPoolBackward: one thread per
// output element (elementwise.h's *At functions), no atomics. Sizes must
// have been checked (CheckWindowArgs).
cudaError_t LaunchIm2Col(cudaStream_t stream, const ImageShape& shape,
                         int kernel, const float* x, float* cols);
cudaError_t LaunchCol2Im(cudaStream_t stream, const ImageShape& shape,
                         int kernel, const float* cols, float* dx);
cudaError_t LaunchMaxPool(cudaStream_t stream, const ImageShape& shape,
                          int pool, const float* x, float* y, int32_t* argmax);
cudaError_t LaunchMaxPoolBackward(cudaStream_t stream, const ImageShape& shape,
                                  int pool, const int32_t* argmax,
                                  const float* dy, float* dx);

// y += alpha * x.
cudaError_t LaunchAxpy(cudaStream_t stream, size_t n, float alpha,
                       const float* x, float* y);

// x *= alpha.
cudaError_t LaunchScale(cudaStream_t stream, size_t n, float alpha, float* x);

// x[i] = value.
cudaError_t LaunchFill(cudaStream_t stream, size_t n, float value, float* x);

// Bits a failed embedding-bag contents check ORs into the backend's flag
// word (see LaunchEmbeddingBagCheck).
enum EmbeddingErrorBits : int32_t {
  kEmbeddingBadOffsets = 1,         // offsets not 0, ..., num_indices sorted
  kEmbeddingBadIndex = 2,           // an index outside [0, num_rows)
  kEmbeddingBadRowOffsets = 4,      // row_offsets likewise
  kEmbeddingBadRowOccurrences = 8,  // the row CSR is not indices' inverse
};

// A message for a non-zero flag word (its lowest set bit).
const char* EmbeddingErrorMessage(int32_t flags);

// Checks the contents of an embedding batch on the device, as
// CheckEmbeddingBatchContents does on the host (the row CSR only when
// `inverse`), and ORs the EmbeddingErrorBits found into *flags (one int32 of
// device memory). Sizes and pointers must have been checked. Never reads
// outside the arrays, whatever they hold.
cudaError_t LaunchEmbeddingBagCheck(
    cudaStream_t stream, int num_bags, int num_rows, int num_indices,
    const int32_t* offsets, const int32_t* indices, const int32_t* row_offsets,
    const int32_t* row_occurrences, bool inverse, int32_t* flags);

// Backend::EmbeddingBagForward: a team of threads (dim rounded up to a power
// of two, at most a warp) per bag, one output element per thread, rows summed
// in occurrence order. Does nothing when *flags != 0 (a failed check).
cudaError_t LaunchEmbeddingBagForward(cudaStream_t stream, bool mean,
                                      int num_bags, int dim,
                                      const int32_t* offsets,
                                      const int32_t* indices, const float* rows,
                                      int bags_per_row, int out_stride,
                                      float* out, const int32_t* flags);

// Backend::EmbeddingBagBackward: a team per unique row, one gradient element
// per thread, the row's occurrences summed in ascending order (each finds its
// bag by binary search in offsets). No atomics. Does nothing when *flags != 0.
cudaError_t LaunchEmbeddingBagBackward(
    cudaStream_t stream, bool mean, int num_bags, int num_rows, int dim,
    const int32_t* offsets, const int32_t* row_offsets,
    const int32_t* row_occurrences, const float* grad_out, int bags_per_row,
    int grad_out_stride, float* grad_rows, const int32_t* flags);

}  // namespace cuda
}  // namespace ps

#endif  // WORKER_BACKEND_CUDA_CUDA_KERNELS_H_
