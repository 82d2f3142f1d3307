#include "worker/backend/cuda/gemm_rate.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ps {
namespace {

std::vector<float> RandomFloats(size_t n, std::mt19937* rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

absl::Status CudaOk(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

absl::Status BlasOk(cublasStatus_t e, const char* what) {
  if (e == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": cuBLAS status ", e));
}

// Seconds per call: `enqueue` issues one call, `sync` waits for all of them.
// Warm-up first (handles, workspaces, kernel loads), then as many calls per
// run as keep a run over kGemmMinRunSeconds; the median of kGemmTrials runs.
template <typename Enqueue, typename Sync>
absl::StatusOr<double> SecondsPerCall(Enqueue enqueue, Sync sync) {
  using Clock = std::chrono::steady_clock;
  int calls = 1;
  auto run = [&]() -> absl::StatusOr<double> {
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < calls; ++i) enqueue();
    PS_RETURN_IF_ERROR(sync());
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  for (int i = 0; i < 3; ++i) enqueue();
  PS_RETURN_IF_ERROR(sync());
  for (;;) {
    PS_ASSIGN_OR_RETURN(double t, run());
    if (t >= kGemmMinRunSeconds || calls >= (1 << 16)) break;
    calls *= 2;
  }
  std::vector<double> runs;
  for (int i = 0; i < kGemmTrials; ++i) {
    PS_ASSIGN_OR_RETURN(double t, run());
    runs.push_back(t / calls);
  }
  std::sort(runs.begin(), runs.end());
  return runs[kGemmTrials / 2];
}

// Backend::Gemm (row-major C = A * B) against cublasSgemm computing the same
// product in the same device memory (column-major: C^T = B^T * A^T).
absl::StatusOr<GemmRate> TimeGemm(Backend* gpu, const std::string& name, int m,
                                  int n, int k, std::mt19937* rng) {
  GemmRate r{name, m, n, k};
  PS_ASSIGN_OR_RETURN(DeviceBuffer<float> a,
                      gpu->Allocate<float>(static_cast<size_t>(m) * k));
  PS_ASSIGN_OR_RETURN(DeviceBuffer<float> b,
                      gpu->Allocate<float>(static_cast<size_t>(k) * n));
  PS_ASSIGN_OR_RETURN(DeviceBuffer<float> c,
                      gpu->Allocate<float>(static_cast<size_t>(m) * n));
  const std::vector<float> ha = RandomFloats(a.size(), rng);
  const std::vector<float> hb = RandomFloats(b.size(), rng);
  gpu->CopyToDevice(ha.data(), ha.size(), a.data());
  gpu->CopyToDevice(hb.data(), hb.size(), b.data());
  PS_RETURN_IF_ERROR(gpu->Synchronize());
  const double flops = 2.0 * m * n * k;
  PS_ASSIGN_OR_RETURN(double backend_s,
                      SecondsPerCall(
                          [&] {
                            gpu->Gemm(Transpose::kNo, Transpose::kNo, m, n, k,
                                      1, a.data(), k, b.data(), n, 0, c.data(),
                                      n);
                          },
                          [&] { return gpu->Synchronize(); }));
  cublasHandle_t handle;
  PS_RETURN_IF_ERROR(BlasOk(cublasCreate(&handle), "cublasCreate"));
  std::unique_ptr<cublasContext, cublasStatus_t (*)(cublasHandle_t)> owner(
      handle, cublasDestroy);
  cublasStatus_t first_error = CUBLAS_STATUS_SUCCESS;
  const float one = 1, zero = 0;
  absl::StatusOr<double> cublas_s = SecondsPerCall(
      [&] {
        cublasStatus_t e =
            cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one,
                        b.data(), n, a.data(), k, &zero, c.data(), n);
        if (first_error == CUBLAS_STATUS_SUCCESS) first_error = e;
      },
      [&] { return CudaOk(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); });
  PS_RETURN_IF_ERROR(cublas_s.status());
  PS_RETURN_IF_ERROR(BlasOk(first_error, "cublasSgemm"));
  r.backend_gflops = flops / backend_s / 1e9;
  r.cublas_gflops = flops / *cublas_s / 1e9;
  return r;
}

}  // namespace

absl::StatusOr<std::vector<GemmRate>> TimeGemms(Backend* gpu) {
  std::mt19937 rng(20261129);
  struct Shape {
    const char* name;
    int m, n, k;
  };
  const Shape shapes[] = {
      {"mlp fc0 forward", 64, 256, 784},
      {"cnn fc0 forward", 64, 1024, 3136},
      {"cnn conv1 forward", 64 * 14 * 14, 64, 800},
      {"square 4096", 4096, 4096, 4096},
  };
  std::vector<GemmRate> rates;
  for (const Shape& s : shapes) {
    PS_ASSIGN_OR_RETURN(GemmRate r, TimeGemm(gpu, s.name, s.m, s.n, s.k, &rng));
    rates.push_back(r);
  }
  return rates;
}

}  // namespace ps
