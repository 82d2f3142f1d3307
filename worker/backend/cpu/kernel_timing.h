// Timings behind the CPU backend's choice between oneDNN and OpenBLAS per
// shape (CpuBackend::CreateDirectConv, CpuBackend::PrepareGemm). Each runs
// the candidates on fixed pseudo-random data of the real shape: one warm-up
// call, then the fastest of a few, in milliseconds of the calling thread's
// CPU time with one thread (what other processes' load disturbs least),
// else of wall time. Private to :cpu_backend.

#ifndef WORKER_BACKEND_CPU_KERNEL_TIMING_H_
#define WORKER_BACKEND_CPU_KERNEL_TIMING_H_

#include <functional>

#include "absl/status/statusor.h"
#include "worker/backend/backend.h"
#include "worker/backend/direct_conv.h"

namespace ps {
namespace cpu_internal {

// The fewest milliseconds of `reps` calls of fn, after one more: CPU time of
// this thread when the kernels run `threads` = 1 thread, else wall time.
double MinMs(const std::function<void()>& fn, int reps, int threads);

// Milliseconds of one training step's convolution work at shape.tune_rows
// rows (max_rows when 0): Forward + BackwardWeights (+ BackwardData with
// input_grad) on `conv`, or the same through `backend`'s Im2Col, Gemm,
// BiasRelu, ColumnSums and Col2Im when conv is null, both with `threads`
// threads. kResourceExhausted when the scratch buffers do not fit.
absl::StatusOr<double> TimeConvStep(Backend* backend, DirectConv* conv,
                                    const DirectConvShape& shape, int threads);

// Milliseconds of a dense row-major Gemm of that shape on OpenBLAS (.first)
// and on oneDNN's sgemm (.second), each with `threads` threads.
std::pair<double, double> TimeGemms(Transpose trans_a, Transpose trans_b, int m,
                                    int n, int k, int threads);

// oneDNN's sgemm with row-major operands, as cblas_sgemm; its threads are
// the calling thread's OpenMP threads (set to `threads` first). Returns
// false when oneDNN rejects the call.
bool DnnlSgemm(Transpose trans_a, Transpose trans_b, int m, int n, int k,
               float alpha, const float* a, int lda, const float* b, int ldb,
               float beta, float* c, int ldc, int threads);

}  // namespace cpu_internal
}  // namespace ps

#endif  // WORKER_BACKEND_CPU_KERNEL_TIMING_H_
