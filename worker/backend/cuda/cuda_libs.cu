// cuBLAS and NCCL behind the plain interface of cuda_libs.h.

#include <cublas_v2.h>

#include "worker/backend/cuda/cuda_libs.h"

// cuda_configure decides whether NCCL is in the build: it defines
// PS_HAVE_NCCL for nvcc and gcc alike and links -lnccl exactly then.
#ifdef PS_HAVE_NCCL
#include <nccl.h>
#endif

namespace ps {
namespace cuda {
namespace {

const char* BlasError(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? nullptr : cublasGetStatusString(s);
}

#ifdef PS_HAVE_NCCL
const char* NcclError(ncclResult_t r) {
  return r == ncclSuccess ? nullptr : ncclGetErrorString(r);
}
#else
constexpr const char* kNoNccl = "NCCL was not found at build time";
#endif

}  // namespace

const char* BlasCreate(cudaStream_t stream, BlasHandle* handle) {
  cublasHandle_t h = nullptr;
  if (const char* err = BlasError(cublasCreate(&h))) return err;
  if (const char* err = BlasError(cublasSetStream(h, stream))) {
    cublasDestroy(h);
    return err;
  }
  *handle = h;
  return nullptr;
}

void BlasDestroy(BlasHandle handle) {
  if (handle != nullptr) cublasDestroy(static_cast<cublasHandle_t>(handle));
}

const char* BlasSgemmRowMajor(BlasHandle handle, bool trans_a, bool trans_b,
                              int m, int n, int k, float alpha, const float* a,
                              int lda, const float* b, int ldb, float beta,
                              float* c, int ldc) {
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap
  // the operands and the roles of m and n; leading dimensions carry over.
  return BlasError(cublasSgemm(static_cast<cublasHandle_t>(handle),
                               trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                               trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                               &alpha, b, ldb, a, lda, &beta, c, ldc));
}

#ifdef PS_HAVE_NCCL

bool NcclAvailable() { return true; }

const char* NcclInitAll(int count, const int* devices, NcclComm* comms) {
  static_assert(sizeof(ncclComm_t) == sizeof(NcclComm), "opaque handle");
  return NcclError(
      ncclCommInitAll(reinterpret_cast<ncclComm_t*>(comms), count, devices));
}

void NcclDestroy(NcclComm comm) {
  if (comm != nullptr) ncclCommDestroy(static_cast<ncclComm_t>(comm));
}

const char* NcclAllReduceSum(NcclComm comm, float* data, size_t n,
                             cudaStream_t stream) {
  return NcclError(ncclAllReduce(data, data, n, ncclFloat32, ncclSum,
                                 static_cast<ncclComm_t>(comm), stream));
}

const char* NcclGroupStart() { return NcclError(ncclGroupStart()); }
const char* NcclGroupEnd() { return NcclError(ncclGroupEnd()); }

const char* NcclAsyncError(NcclComm comm) {
  ncclResult_t async = ncclSuccess;
  if (const char* err = NcclError(
          ncclCommGetAsyncError(static_cast<ncclComm_t>(comm), &async))) {
    return err;
  }
  // ncclInProgress: a non-blocking call still running, not an error.
  return async == ncclInProgress ? nullptr : NcclError(async);
}

void NcclAbort(NcclComm comm) {
  if (comm != nullptr) ncclCommAbort(static_cast<ncclComm_t>(comm));
}

#else

bool NcclAvailable() { return false; }
const char* NcclInitAll(int, const int*, NcclComm*) { return kNoNccl; }
void NcclDestroy(NcclComm) {}
const char* NcclAllReduceSum(NcclComm, float*, size_t, cudaStream_t) {
  return kNoNccl;
}
const char* NcclGroupStart() { return kNoNccl; }
const char* NcclGroupEnd() { return kNoNccl; }
const char* NcclAsyncError(NcclComm) { return kNoNccl; }
void NcclAbort(NcclComm) {}

#endif  // PS_HAVE_NCCL

}  // namespace cuda
}  // namespace ps
