// CPU backend throughput: forward+backward of the MLP 784-256-128-10 (and
// softmax regression 784-10) in samples/s and GFLOP/s, next to raw OpenBLAS
// sgemm GFLOP/s measured in the same binary, so the model's efficiency reads
// directly as a fraction of what the BLAS delivers on this machine; and
// BM_VsTorch: the MLP's and the built-in CNN's forward+backward time per
// sample beside PyTorch's for the same net and batch, on the same cores, in
// the same run (tools/bench/torch_step.py, run by /usr/bin/python3 in a
// child process that inherits this one's cores).
//
//   bazel build --config=opt //worker/model:model_benchmark
//   BIN=$(bazel info --config=opt bazel-bin)
//   OPENBLAS_CORETYPE=SkylakeX taskset -c 1
//       $BIN/worker/model/model_benchmark --benchmark_filter=VsTorch
//
// (from the workspace root, so that tools/bench/torch_step.py is found; or
// set PS_TORCH_STEP to its path). Arguments: batch size, OpenBLAS threads
// (process-wide; see cpu_backend.h); BM_VsTorch: model (0 MLP, 1 CNN),
// batch, kernels (CpuKernels: 0 OpenBLAS, 1 oneDNN, 2 timed per shape),
// always one thread. Rates use wall time: on a shared machine, compare runs
// taken side by side; BM_VsTorch also compares CPU time per sample (ours:
// the thread's, PyTorch's: the process's), which others' load disturbs less.

#include <cblas.h>
#include <time.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "core/model_spec.h"
#include "worker/backend/cpu/cpu_backend.h"
#include "worker/model/model.h"
#include "worker/model/testing/model_test_util.h"

namespace ps {
namespace {

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

void BM_MlpTrainStep(benchmark::State& state) {
  TrainStep(state, FashionMlpSpec());
}
BENCHMARK(BM_MlpTrainStep)
    ->ArgNames({"batch", "threads"})
    ->ArgsProduct({{64, 256}, {1, 2}})
    ->UseRealTime();

// K replicas (benchmark threads), each with its own CpuBackend and Model and
// one OpenBLAS thread: how a worker with K "cpu:i" devices uses K cores.
// items_per_second is the total over the replicas; batch is per replica.
void BM_MlpTrainStepReplicas(benchmark::State& state) {
  TrainStep(state, FashionMlpSpec());
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

// ---- Against PyTorch ---------------------------------------------------

// PyTorch's wall and CPU microseconds per sample (<= 0: unavailable).
struct TorchTime {
  double wall_us = -1;
  double cpu_us = -1;
};

std::string TorchScript() {
  if (const char* env = std::getenv("PS_TORCH_STEP")) return env;
  return "tools/bench/torch_step.py";
}

// The number after "key": in a RESULT line, or -1.
double JsonNumber(const std::string& line, const std::string& key) {
  const size_t at = line.find("\"" + key + "\": ");
  if (at == std::string::npos) return -1;
  const size_t start = at + key.size() + 4;
  const size_t end = line.find_first_of(",}", start);
  double v = -1;
  return absl::SimpleAtod(line.substr(start, end - start), &v) ? v : -1;
}

// Runs torch_step.py once per (model, batch) and keeps the answer.
TorchTime Torch(const char* model, int batch) {
  static std::map<std::string, TorchTime>* cache =
      new std::map<std::string, TorchTime>();
  const std::string key = absl::StrCat(model, "/", batch);
  auto it = cache->find(key);
  if (it != cache->end()) return it->second;
  const std::string cmd =
      absl::StrCat("/usr/bin/python3 ", TorchScript(), " --model ", model,
                   " --batch ", batch, " --threads 1 2>&1");
  TorchTime t;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    while (fgets(buf, sizeof(buf), p) != nullptr) {
      const std::string line(buf);
      if (line.rfind("RESULT ", 0) != 0) continue;
      t.wall_us = JsonNumber(line, "us_per_sample");
      t.cpu_us = JsonNumber(line, "cpu_us_per_sample");
    }
    pclose(p);
  }
  return (*cache)[key] = t;
}

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// Counters: us_per_sample and cpu_us_per_sample (ours), torch_us and
// torch_cpu_us (PyTorch's), vs_torch and cpu_vs_torch (ours / PyTorch's:
// below 1 is faster than PyTorch).
void BM_VsTorch(benchmark::State& state) {
  const bool cnn = state.range(0) == 1;
  const ModelSpec spec = cnn ? FashionCnnSpec() : FashionMlpSpec();
  const size_t batch = static_cast<size_t>(state.range(1));
  const auto kernels = static_cast<CpuKernels>(state.range(2));
  const TorchTime torch = Torch(cnn ? "cnn" : "mlp", static_cast<int>(batch));
  absl::StatusOr<std::unique_ptr<CpuBackend>> cpu =
      CpuBackend::Create(0, 1, kernels);
  if (!cpu.ok()) return state.SkipWithError("CpuBackend::Create failed");
  absl::StatusOr<StepBench> step = MakeStepBench(spec, cpu->get(), batch);
  if (!step.ok()) return state.SkipWithError("Model::Create failed");
  const double cpu_start = ThreadCpuSeconds();
  const auto wall_start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    if (!step->Step(nullptr).ok()) {
      return state.SkipWithError("ComputeGradient failed");
    }
    benchmark::DoNotOptimize(step->grad.data());
  }
  const double samples = static_cast<double>(state.iterations()) * batch;
  const double wall_us = 1e6 *
                         std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - wall_start)
                             .count() /
                         samples;
  const double cpu_us = 1e6 * (ThreadCpuSeconds() - cpu_start) / samples;
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["us_per_sample"] = wall_us;
  state.counters["cpu_us_per_sample"] = cpu_us;
  state.counters["torch_us"] = torch.wall_us;
  state.counters["torch_cpu_us"] = torch.cpu_us;
  if (torch.wall_us > 0) {
    state.counters["vs_torch"] = wall_us / torch.wall_us;
    state.counters["cpu_vs_torch"] = cpu_us / torch.cpu_us;
  }
  state.SetLabel(absl::StrCat(cnn ? "cnn " : "mlp ", CpuKernelsName(kernels),
                              torch.wall_us > 0 ? "" : " (no PyTorch)"));
}
BENCHMARK(BM_VsTorch)
    ->ArgNames({"cnn", "batch", "kernels"})
    ->Args({0, 64, 2})
    ->Args({0, 256, 2})
    ->Args({1, 64, 2})
    ->Args({0, 64, 0})
    ->Args({1, 64, 0})
    ->UseRealTime();

}  // namespace
}  // namespace ps
