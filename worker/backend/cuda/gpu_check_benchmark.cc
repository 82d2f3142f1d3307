// The GPU path against the CPU path and against cuBLAS itself, as one JSON
// object on stdout; tools/gpu_check.sh runs it on a machine with a GPU and
// puts the figures in its summary:
//
//   bazel run //worker/backend/cuda:gpu_check_benchmark > bench.json
//
//   "ops"    every backend call of an MLP and a CNN forward+backward, GPU
//            against CPU on the same inputs (gpu_cpu_compare.h): name,
//            max_rel_diff, tolerance, pass
//   "models" the same for the two models' gradients per tensor, losses and
//            correct counts
//   "gemm"   Backend::Gemm against cublasSgemm on the same shape
//            (gemm_rate.h): backend_gflops, cublas_gflops, ratio, target
//   "steps"  the MLP's and the CNN's training step on the GPU, batch 64
//            (step_time.h): host_io_ms (host parameters in, host gradient
//            out, through staging), pinned_io_ms (the same from and into
//            pinned memory, as the trainer calls it) and resident_ms
//            (compute alone);
//            reported, not judged
//   "pass"   every figure within its tolerance or target
// The exit code is 0 when "pass" is true, 1 otherwise or on an error (then
// the object is {"gpu": true, "pass": false, "error": "..."}). Without a
// visible GPU it prints {"gpu": false, "skipped": "..."} and exits 0.

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/json_string.h"
#include "common/status_macros.h"
#include "worker/backend/backend.h"
#include "worker/backend/backend_factory.h"
#include "worker/backend/cuda/gemm_rate.h"
#include "worker/backend/cuda/gpu_cpu_compare.h"
#include "worker/backend/cuda/step_time.h"

namespace ps {
namespace {

// A finite number, or null (JSON has no NaN or infinity).
std::string Number(double v) {
  return std::isfinite(v) ? absl::StrFormat("%.3g", v) : "null";
}

// What Measure() found: the comparisons and the GEMM rates.
struct Report {
  std::string device;  // cudaDeviceProp::name
  std::vector<Check> checks;
  std::vector<GemmRate> gemms;
  std::vector<StepTime> steps;

  bool pass() const {
    for (const Check& c : checks) {
      if (!c.pass()) return false;
    }
    for (const GemmRate& g : gemms) {
      if (!g.pass()) return false;
    }
    return true;
  }
};

std::string ToJson(const Report& r) {
  std::string out =
      absl::StrCat("{\n  \"gpu\": true,\n  \"device\": ", JsonString(r.device),
                   ",\n  \"pass\": ", r.pass() ? "true" : "false");
  for (const char* group : {"ops", "models"}) {
    std::vector<std::string> rows;
    for (const Check& c : r.checks) {
      if (c.group != group) continue;
      rows.push_back(absl::StrCat("    {\"name\": ", JsonString(c.name),
                                  ", \"max_rel_diff\": ", Number(c.value),
                                  ", \"tolerance\": ", Number(c.tolerance),
                                  ", \"pass\": ", c.pass() ? "true" : "false",
                                  "}"));
    }
    absl::StrAppend(&out, ",\n  \"", group, "\": [\n",
                    absl::StrJoin(rows, ",\n"), "\n  ]");
  }
  std::vector<std::string> rows;
  for (const GemmRate& g : r.gemms) {
    rows.push_back(absl::StrFormat(
        "    {\"name\": %s, \"m\": %d, \"n\": %d, \"k\": %d, "
        "\"backend_gflops\": %.1f, \"cublas_gflops\": %.1f, \"ratio\": %.3f, "
        "\"target\": %.2f, \"pass\": %s}",
        JsonString(g.name), g.m, g.n, g.k, g.backend_gflops, g.cublas_gflops,
        g.ratio(), kGemmTarget, g.pass() ? "true" : "false"));
  }
  absl::StrAppend(&out, ",\n  \"gemm\": [\n", absl::StrJoin(rows, ",\n"),
                  "\n  ]");
  rows.clear();
  for (const StepTime& t : r.steps) {
    rows.push_back(absl::StrFormat(
        "    {\"model\": %s, \"batch\": %d, \"parameters\": %d, "
        "\"host_io_ms\": %.3f, \"pinned_io_ms\": %.3f, "
        "\"resident_ms\": %.3f}",
        JsonString(t.model), kStepBatch, t.parameters, t.host_io_ms,
        t.pinned_io_ms, t.resident_ms));
  }
  absl::StrAppend(&out, ",\n  \"steps\": [\n", absl::StrJoin(rows, ",\n"),
                  "\n  ]\n}\n");
  return out;
}

absl::StatusOr<Report> Measure() {
  Report r;
  cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, 0);
  if (e != cudaSuccess) {
    return absl::InternalError(
        absl::StrCat("cudaGetDeviceProperties: ", cudaGetErrorString(e)));
  }
  r.device = prop.name;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Backend> cpu, CreateBackend("cpu:0", 0));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Backend> gpu, CreateBackend("gpu:0", 0));
  PS_RETURN_IF_ERROR(CompareMlpOps(cpu.get(), gpu.get(), &r.checks));
  PS_RETURN_IF_ERROR(CompareCnnOps(cpu.get(), gpu.get(), &r.checks));
  PS_RETURN_IF_ERROR(CompareModels(cpu.get(), gpu.get(), &r.checks));
  PS_ASSIGN_OR_RETURN(r.gemms, TimeGemms(gpu.get()));
  PS_ASSIGN_OR_RETURN(r.steps, TimeModelSteps(gpu.get()));
  return r;
}

}  // namespace
}  // namespace ps

int main() {
  if (ps::GpuCount() == 0) {
    std::printf("{\"gpu\": false, \"skipped\": %s}\n",
                ps::JsonString(ps::CudaBuilt() ? "no CUDA device visible"
                                               : "built without CUDA")
                    .c_str());
    return 0;
  }
  absl::StatusOr<ps::Report> report = ps::Measure();
  if (!report.ok()) {
    std::printf("{\"gpu\": true, \"pass\": false, \"error\": %s}\n",
                ps::JsonString(report.status().ToString()).c_str());
    return 1;
  }
  std::fputs(ps::ToJson(*report).c_str(), stdout);
  return report->pass() ? 0 : 1;
}
