// CPU backend throughput: forward+backward of the MLP 784-256-128-10 (and
// softmax regression 784-10) in samples/s and GFLOP/s, next to raw OpenBLAS
// sgemm GFLOP/s measured in the same binary, so the model's efficiency reads
// directly as a fraction of what the BLAS delivers on this machine.
//
//   bazel run --config=opt //worker/model:model_benchmark
//   bazel run --config=opt //worker/model:model_benchmark --
//   --benchmark_filter=Mlp
//
// Arguments: batch size, OpenBLAS threads (process-wide; see cpu_backend.h).
// Rates use wall time: on a shared machine, compare runs taken side by side.

#include <cblas.h>

#include <cmath>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/model_spec.h"
#include "worker/backend/cpu/cpu_backend.h"
#include "worker/model/model.h"
#include "worker/model/testing/model_test_util.h"

namespace ps {
namespace {

ModelSpec MlpSpec() {
  ModelSpec s;
  s.mutable_mlp()->set_input_dim(784);
  s.mutable_mlp()->add_hidden(256);
  s.mutable_mlp()->add_hidden(128);
  s.mutable_mlp()->set_num_classes(10);
  return s;
}

ModelSpec SoftmaxSpec() {
  ModelSpec s;
  s.mutable_softmax()->set_input_dim(784);
  s.mutable_softmax()->set_num_classes(10);
  return s;
}

// Multiply-add FLOPs of one forward+backward: forward and weight-gradient
// GEMMs for every layer, input-gradient GEMMs for every layer but the first
// (the model skips d/dx), 2 FLOPs per multiply-add. Element-wise work is
// left out (it is < 1% here).
double TrainFlops(const std::vector<uint32_t>& widths, double batch) {
  double flops = 0;
  for (size_t l = 0; l + 1 < widths.size(); ++l) {
    const double mac = batch * widths[l] * widths[l + 1];
    flops += 2 * mac * (l == 0 ? 2 : 3);
  }
  return flops;
}

void TrainStep(benchmark::State& state, const ModelSpec& spec) {
  const size_t batch = static_cast<size_t>(state.range(0));
  // Benchmark threads start their loops together, so no replica computes
  // while another sets OpenBLAS's (process-wide) thread count.
  absl::StatusOr<std::unique_ptr<CpuBackend>> cpu = CpuBackend::Create(
      state.thread_index(), static_cast<int>(state.range(1)));
  if (!cpu.ok()) return state.SkipWithError("CpuBackend::Create failed");
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Create(spec, cpu->get(), batch);
  if (!model.ok()) return state.SkipWithError("Model::Create failed");
  const std::vector<float> params = InitParameters((*model)->tensors(), 1);
  // Realistic inputs: pixel intensities in [0, 1], as MNIST after scaling.
  const LabeledData d = LinearlySeparable(batch, 784, 10, 2);
  std::vector<float> x(d.x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = 1.0f / (1.0f + std::exp(-d.x[i]));
  }
  std::vector<float> grad((*model)->num_parameters());
  double loss = 0;
  for (auto _ : state) {
    absl::Status s =
        (*model)->ComputeGradient(params.data(), x.data(), d.labels.data(),
                                  batch, grad.data(), &loss, nullptr);
    if (!s.ok()) return state.SkipWithError("ComputeGradient failed");
    benchmark::DoNotOptimize(grad.data());
  }
  const double flops = TrainFlops(ModelLayerWidths(spec), batch);
  // items_per_second is samples/s. Per-thread totals with kIsRate: summed
  // over benchmark threads (replicas) and divided by the wall time, like
  // items_per_second (kIsIterationInvariantRate would count threads twice).
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["GFLOPs"] =
      benchmark::Counter(flops * 1e-9 * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

void BM_MlpTrainStep(benchmark::State& state) { TrainStep(state, MlpSpec()); }
BENCHMARK(BM_MlpTrainStep)
    ->ArgNames({"batch", "threads"})
    ->ArgsProduct({{64, 256}, {1, 2}})
    ->UseRealTime();

// K replicas (benchmark threads), each with its own CpuBackend and Model and
// one OpenBLAS thread: how a worker with K "cpu:i" devices uses K cores.
// items_per_second is the total over the replicas; batch is per replica.
void BM_MlpTrainStepReplicas(benchmark::State& state) {
  TrainStep(state, MlpSpec());
}
BENCHMARK(BM_MlpTrainStepReplicas)
    ->ArgNames({"batch", "threads"})
    ->ArgsProduct({{64, 256}, {1}})
    ->Threads(2)
    ->UseRealTime();

void BM_SoftmaxTrainStep(benchmark::State& state) {
  TrainStep(state, SoftmaxSpec());
}
BENCHMARK(BM_SoftmaxTrainStep)
    ->ArgNames({"batch", "threads"})
    ->ArgsProduct({{64, 256}, {1, 2}})
    ->UseRealTime();

// Raw sgemm, C[m x n] = A[m x k] B[k x n], the shape of the MLP's first layer
// (m = batch, k = 784, n = 256): the ceiling for the model's GFLOP/s.
void BM_Sgemm(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0));
  const int k = static_cast<int>(state.range(1));
  const int n = static_cast<int>(state.range(2));
  absl::StatusOr<std::unique_ptr<CpuBackend>> cpu =
      CpuBackend::Create(0, static_cast<int>(state.range(3)));
  if (!cpu.ok()) return state.SkipWithError("CpuBackend::Create failed");
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> a(static_cast<size_t>(m) * k),
      b(static_cast<size_t>(k) * n), c(static_cast<size_t>(m) * n);
  for (float& v : a) v = u(rng);
  for (float& v : b) v = u(rng);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f,
                a.data(), k, b.data(), n, 0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOPs"] = benchmark::Counter(
      2.0 * m * n * k * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Sgemm)
    ->ArgNames({"m", "k", "n", "threads"})
    ->ArgsProduct({{64, 256}, {784}, {256}, {1, 2}})
    ->UseRealTime();

}  // namespace
}  // namespace ps
