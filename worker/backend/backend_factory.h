// Creates backends from device strings, whatever the build: CPU-only builds
// link this too and answer "gpu:*" with a clear error.
//
//   absl::StatusOr<std::unique_ptr<Backend>> b =
//       CreateBackend("gpu:1", /*cpu_threads=*/0);
//   if (!b.ok()) { ... }  // e.g. "device "gpu:1": no such GPU (1 visible)"

#ifndef WORKER_BACKEND_BACKEND_FACTORY_H_
#define WORKER_BACKEND_BACKEND_FACTORY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/backend/backend.h"
#include "worker/backend/cpu/cpu_backend.h"

namespace ps {

// A backend for `device`: "cpu:<i>" (CpuBackend) or "gpu:<i>" (CudaBackend
// on GPU i), i a decimal index. cpu_threads applies to "cpu:*" only: > 0 sets
// OpenBLAS's PROCESS-WIDE thread count (see cpu/cpu_backend.h), 0 leaves it.
// kInvalidArgument for a malformed device string or cpu_threads < 0;
// kFailedPrecondition for "gpu:*" when CUDA was not built in or no such GPU
// is visible. Thread-safe apart from the OpenBLAS setting. `cpu_kernels`
// and `cpu_kernel_choices` (optional, outliving the backend) apply to
// "cpu:*" only (CpuKernels, cpu/cpu_backend.h).
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
    const std::string& device, int cpu_threads,
    CpuKernels cpu_kernels = CpuKernels::kOpenBlas,
    KernelChoices* cpu_kernel_choices = nullptr);

// CpuBackend::BlasCoreAdvice(): empty, or a warning that OpenBLAS runs
// kernels below this CPU's vector unit and the OPENBLAS_CORETYPE to set.
std::string CpuBlasAdvice();
// CpuBackend::BlasCoreToSet(): the OPENBLAS_CORETYPE that would fit this CPU
// better than the kernels in use, or "".
std::string CpuBlasCoreToSet();

// True when this binary was built with the CUDA backend.
bool CudaBuilt();

// Visible GPUs (0 without CUDA in the build or without a device).
int GpuCount();

// A LocalReducer (NCCL all-reduce) over `backends`, which must all be GPU
// backends on distinct GPUs (see cuda/gpu_reducer.h). kFailedPrecondition
// without CUDA/NCCL in the build; kInvalidArgument for a non-GPU backend.
absl::StatusOr<std::unique_ptr<LocalReducer>> CreateGpuReducer(
    const std::vector<Backend*>& backends);

}  // namespace ps

#endif  // WORKER_BACKEND_BACKEND_FACTORY_H_
