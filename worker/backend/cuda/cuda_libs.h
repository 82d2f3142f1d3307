// Thin C-style wrappers over cuBLAS and NCCL, compiled by nvcc
// (cuda_libs.cu). Their headers pull in CUDA's extension-less C++ headers
// (<nv/target>), which only nvcc's own include path provides, so the
// gcc-compiled backend reaches both libraries through these wrappers.
//
// Every function that can fail returns nullptr on success, else a static
// description of the failure (from cublasGetStatusString/ncclGetErrorString).
//
//   ps::cuda::BlasHandle h;
//   if (const char* err = ps::cuda::BlasCreate(stream, &h)) { ... }

#ifndef WORKER_BACKEND_CUDA_CUDA_LIBS_H_
#define WORKER_BACKEND_CUDA_CUDA_LIBS_H_

#include <cuda_runtime.h>

#include <cstddef>

namespace ps {
namespace cuda {

using BlasHandle = void*;  // a cublasHandle_t
using NcclComm = void*;    // an ncclComm_t

// A cuBLAS handle bound to `stream` (current device), default math mode
// (no TF32), so results track the CPU backend's float32.
const char* BlasCreate(cudaStream_t stream, BlasHandle* handle);
void BlasDestroy(BlasHandle handle);

// Row-major C[m x n] = alpha * op(A) op(B) + beta * C, as Backend::Gemm.
const char* BlasSgemmRowMajor(BlasHandle handle, bool trans_a, bool trans_b,
                              int m, int n, int k, float alpha, const float* a,
                              int lda, const float* b, int ldb, float beta,
                              float* c, int ldc);

// Whether NCCL is in the build (PS_HAVE_NCCL, see cuda_configure.bzl).
bool NcclAvailable();

// One communicator per device of `devices` (distinct ordinals), in one call.
const char* NcclInitAll(int count, const int* devices, NcclComm* comms);
void NcclDestroy(NcclComm comm);

// In-place float32 sum across the communicator's ranks, on `stream`.
const char* NcclAllReduceSum(NcclComm comm, float* data, size_t n,
                             cudaStream_t stream);
const char* NcclGroupStart();
const char* NcclGroupEnd();

// The communicator's asynchronous error: a failure NCCL found after the call
// that enqueued the work had returned (a peer gone, a network error). Null
// while there is none. Cheap; safe to poll while work is in flight.
const char* NcclAsyncError(NcclComm comm);
// Aborts the communicator's pending work and frees it, without waiting for
// the other ranks (ncclCommAbort); the handle is invalid afterwards.
void NcclAbort(NcclComm comm);

}  // namespace cuda
}  // namespace ps

#endif  // WORKER_BACKEND_CUDA_CUDA_LIBS_H_
