#include "worker/backend/backend_factory.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "worker/backend/cpu/cpu_backend.h"

#ifdef PS_HAVE_CUDA
#include "worker/backend/cuda/cuda_backend.h"
#include "worker/backend/cuda/gpu_reducer.h"
#endif

namespace ps {
namespace {

// An index beyond any real machine: keeps "cpu:99999999999" an error
// instead of a silently wrapped int.
constexpr int kMaxDeviceIndex = 1 << 16;

struct ParsedDevice {
  std::string kind;
  int index = 0;
};

absl::StatusOr<ParsedDevice> ParseDevice(const std::string& device) {
  auto bad = [&device](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("device \"", device, "\": ", why,
                     " (want \"cpu:<index>\" or \"gpu:<index>\")"));
  };
  const size_t colon = device.find(':');
  if (colon == std::string::npos) return bad("missing ':'");
  ParsedDevice parsed;
  parsed.kind = device.substr(0, colon);
  const absl::string_view index = absl::string_view(device).substr(colon + 1);
  if (parsed.kind != "cpu" && parsed.kind != "gpu") {
    return bad("unknown device kind");
  }
  if (index.empty()) return bad("missing index");
  for (char c : index) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      return bad("index is not a non-negative integer");
    }
  }
  if (index.size() > 6 || !absl::SimpleAtoi(index, &parsed.index) ||
      parsed.index > kMaxDeviceIndex) {
    return bad("index too large");
  }
  return parsed;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
    const std::string& device, int cpu_threads, CpuKernels cpu_kernels,
    KernelChoices* cpu_kernel_choices) {
  PS_ASSIGN_OR_RETURN(ParsedDevice parsed, ParseDevice(device));
  if (parsed.kind == "cpu") {
    PS_ASSIGN_OR_RETURN(std::unique_ptr<CpuBackend> cpu,
                        CpuBackend::Create(parsed.index, cpu_threads,
                                           cpu_kernels, cpu_kernel_choices));
    return std::unique_ptr<Backend>(std::move(cpu));
  }
#ifdef PS_HAVE_CUDA
  // CudaBackend's errors name "gpu:<i>" already.
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> gpu,
                      CudaBackend::Create(parsed.index));
  return std::unique_ptr<Backend>(std::move(gpu));
#else
  return absl::FailedPreconditionError(
      absl::StrCat("device \"", device,
                   "\": this binary was built without CUDA (no nvcc found at "
                   "build time); use \"cpu:<index>\""));
#endif
}

std::string CpuBlasAdvice() { return CpuBackend::BlasCoreAdvice(); }
std::string CpuBlasCoreToSet() { return CpuBackend::BlasCoreToSet(); }

bool CudaBuilt() {
#ifdef PS_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int GpuCount() {
#ifdef PS_HAVE_CUDA
  return CudaBackend::DeviceCount();
#else
  return 0;
#endif
}

absl::StatusOr<std::unique_ptr<LocalReducer>> CreateGpuReducer(
    const std::vector<Backend*>& backends) {
#ifdef PS_HAVE_CUDA
  PS_ASSIGN_OR_RETURN(std::unique_ptr<GpuReducer> r,
                      GpuReducer::Create(backends));
  return std::unique_ptr<LocalReducer>(std::move(r));
#else
  return absl::FailedPreconditionError(
      "CreateGpuReducer: this binary was built without CUDA");
#endif
}

}  // namespace ps
