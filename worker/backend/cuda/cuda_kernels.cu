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

}  // namespace

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
