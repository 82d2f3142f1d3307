// Backend::Gemm on a GPU against a plain cublasSgemm on the same shape and
// the same device memory, for gpu_check_benchmark:
//
//   absl::StatusOr<std::vector<GemmRate>> r = TimeGemms(gpu.get());
//   // r->at(i).ratio(): the backend's GFLOP/s over cuBLAS's
//
// Each rate is the median of kGemmTrials timed runs of back-to-back calls
// (each run ended by a synchronisation, host clock, after a warm-up), with
// enough calls per run to last kGemmMinRunSeconds. Inputs are random (never
// zeros, which can run faster than real data).

#ifndef WORKER_BACKEND_CUDA_GEMM_RATE_H_
#define WORKER_BACKEND_CUDA_GEMM_RATE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/backend/backend.h"

namespace ps {

// Backend::Gemm must reach this fraction of cuBLAS's own rate.
inline constexpr double kGemmTarget = 0.5;
inline constexpr int kGemmTrials = 5;
inline constexpr double kGemmMinRunSeconds = 0.02;

struct GemmRate {
  std::string name;
  int m = 0, n = 0, k = 0;  // C [m x n] = A [m x k] * B [k x n], row-major
  double backend_gflops = 0;
  double cublas_gflops = 0;
  double ratio() const {
    return cublas_gflops > 0 ? backend_gflops / cublas_gflops : 0;
  }
  bool pass() const { return ratio() >= kGemmTarget; }
};

// The GEMM shapes of the MLP's and the CNN's heaviest layers (batch 64) and
// a 4096^3 one that fills the chip, on `gpu` (a "gpu:N" backend, whose
// device must be the current CUDA device). Errors: an allocation, a failed
// call, a cuBLAS status.
absl::StatusOr<std::vector<GemmRate>> TimeGemms(Backend* gpu);

}  // namespace ps

#endif  // WORKER_BACKEND_CUDA_GEMM_RATE_H_
