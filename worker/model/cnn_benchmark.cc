// CPU backend throughput of the built-in CNN (configs/jobs/fashion_cnn.pbtxt:
// conv5x5-32, pool 2, conv5x5-64, pool 2, fc 1024, fc 10 on 28x28x1): one
// forward+backward step in samples/s and GFLOP/s, next to raw OpenBLAS sgemm
// at the step's own GEMM shapes in the same binary, so the step's efficiency
// reads as a fraction of what the BLAS delivers on these shapes.
//
//   bazel run --config=opt //worker/model:cnn_benchmark
//   bazel run --config=opt //worker/model:cnn_benchmark --
//       --benchmark_filter=CnnTrainStep
//
// Arguments: batch size, OpenBLAS threads (process-wide; see cpu_backend.h),
// kernels (CpuKernels: 0 OpenBLAS with im2col, 1 oneDNN, 2 timed per shape).
// The same step beside PyTorch's is in //worker/model:model_benchmark.
// Rates use wall time: on a shared machine, compare runs taken side by side.
// The label names OpenBLAS's kernel set: "Prescott" on a CPU with AVX-512
// means OPENBLAS_CORETYPE=SkylakeX is missing (CpuBackend::BlasCoreAdvice).
// Per-op figures (Im2Col, Col2Im, pooling) are in
// //worker/backend/cpu:cpu_conv_benchmark.

#include <cblas.h>

#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "core/model_spec.h"
#include "worker/backend/cpu/cpu_backend.h"
#include "worker/model/model.h"
#include "worker/model/testing/model_test_util.h"

namespace ps {
namespace {

// Multiply-add FLOPs of one forward+backward of the CNN (2 per multiply-add):
// per conv layer the forward and dW GEMMs, plus the input-gradient GEMM for
// every layer but the first; per dense layer all three. Element-wise work
// (im2col, pooling, ReLU) is left out: it is what the step pays on top.
double CnnTrainFlops(const ModelSpec& spec, double batch) {
  double flops = 0;
  bool first = true;
  for (const ConvLayerShape& s : CnnConvLayers(spec.cnn())) {
    const double mac =
        batch * s.in_h * s.in_w * s.kernel * s.kernel * s.in_c * s.filters;
    flops += 2 * mac * (first ? 2 : 3);
    first = false;
  }
  const std::vector<uint32_t> widths = ModelLayerWidths(spec);
  for (size_t l = 0; l + 1 < widths.size(); ++l) {
    flops += 2 * batch * widths[l] * widths[l + 1] * 3;
  }
  return flops;
}

void BM_CnnTrainStep(benchmark::State& state) {
  const ModelSpec spec = FashionCnnSpec();
  const size_t batch = static_cast<size_t>(state.range(0));
  absl::StatusOr<std::unique_ptr<CpuBackend>> cpu =
      CpuBackend::Create(0, static_cast<int>(state.range(1)),
                         static_cast<CpuKernels>(state.range(2)));
  if (!cpu.ok()) return state.SkipWithError("CpuBackend::Create failed");
  // Pixel intensities in [0, 1], as Fashion-MNIST after scaling.
  absl::StatusOr<StepBench> step = MakeStepBench(spec, cpu->get(), batch);
  if (!step.ok()) return state.SkipWithError("Model::Create failed");
  double loss = 0;
  for (auto _ : state) {
    if (!step->Step(&loss).ok()) {
      return state.SkipWithError("ComputeGradient failed");
    }
    benchmark::DoNotOptimize(step->grad.data());
  }
  state.SetItemsProcessed(state.iterations() * batch);
  state.SetLabel(
      absl::StrCat(CpuKernelsName(static_cast<CpuKernels>(state.range(2))),
                   " openblas:", CpuBackend::BlasCore()));
  state.counters["GFLOPs"] =
      benchmark::Counter(CnnTrainFlops(spec, batch) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_CnnTrainStep)
    ->ArgNames({"batch", "threads", "kernels"})
    ->ArgsProduct({{32, 64}, {1}, {0, 1, 2}})
    ->UseRealTime();

// Raw sgemm C[m x n] = op(A) op(B) at the step's GEMM shapes for batch 64:
// conv2 forward (m = 64 * 14 * 14 pixels, k = 800, n = 64), conv2 dW
// (A^T: 800 x 64 over k = pixels), conv2 d_cols (B^T), fc0 forward (64 x
// 3136 x 1024). The ceiling for the step's GFLOP/s.
void BM_Sgemm(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0));
  const int k = static_cast<int>(state.range(1));
  const int n = static_cast<int>(state.range(2));
  const bool ta = state.range(3) & 1, tb = state.range(3) & 2;
  absl::StatusOr<std::unique_ptr<CpuBackend>> cpu = CpuBackend::Create(0, 1);
  if (!cpu.ok()) return state.SkipWithError("CpuBackend::Create failed");
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> a(static_cast<size_t>(m) * k),
      b(static_cast<size_t>(k) * n), c(static_cast<size_t>(m) * n);
  for (float& v : a) v = u(rng);
  for (float& v : b) v = u(rng);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a.data(),
                ta ? m : k, b.data(), tb ? k : n, 0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  state.SetLabel("openblas:" + CpuBackend::BlasCore());
  state.counters["GFLOPs"] = benchmark::Counter(
      2.0 * m * n * k * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Sgemm)
    ->ArgNames({"m", "k", "n", "trans"})
    ->Args({64 * 28 * 28, 25, 32, 0})   // conv1 forward
    ->Args({64 * 14 * 14, 800, 64, 0})  // conv2 forward
    ->Args({800, 64 * 14 * 14, 64, 1})  // conv2 dW
    ->Args({64 * 14 * 14, 64, 800, 2})  // conv2 d_cols
    ->Args({64, 3136, 1024, 0})         // fc0 forward
    ->UseRealTime();

}  // namespace
}  // namespace ps
