// Benchmark of the shard's apply path: the optimizer update of one chunk
// (and the BSP gradient sum), next to a memcpy of the same bytes.
//
//   bazel run -c opt --config=opt //server:apply_benchmark --
//       --benchmark_min_time=0.2   (one command line)
//
// bytes_per_second counts every byte the loop must read or write once:
// memcpy 8 per float (read + write), plain SGD 12 (p, g in; p out), SGD with
// momentum 20 (p, g, m in; p, m out), Adam 28 (p, g, m, v in; p, m, v out),
// the gradient sum 12 (acc, g in; acc out). A memory-bound loop that streams
// at memcpy's speed reports the same bytes_per_second as memcpy.
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "proto/job.pb.h"
#include "server/optimizer.h"

namespace ps {
namespace {

// Uniform in [-scale, scale) with 24 random bits: realistic magnitudes, no
// denormals.
std::vector<float> RandomFloats(size_t n, uint64_t seed, float scale) {
  std::vector<float> v(n);
  uint64_t z = seed;
  for (size_t i = 0; i < n; ++i) {
    z += 0x9E3779B97F4A7C15ull;
    uint64_t x = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    v[i] = scale * (static_cast<float>(x >> 40) * 0x1.0p-23f - 1.0f);
  }
  return v;
}

void SetCounters(benchmark::State& state, size_t n, size_t bytes_per_float) {
  const double items = static_cast<double>(state.iterations()) * n;
  state.SetBytesProcessed(static_cast<int64_t>(items * bytes_per_float));
  state.counters["params/s"] =
      benchmark::Counter(items, benchmark::Counter::kIsRate);
}

void BM_Memcpy(benchmark::State& state) {
  const size_t n = state.range(0);
  const std::vector<float> src = RandomFloats(n, 1, 1.0f);
  std::vector<float> dst(n, 0.0f);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), n * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  SetCounters(state, n, 8);
}

void RunApply(benchmark::State& state, const OptimizerSpec& spec,
              size_t bytes_per_float) {
  const size_t n = state.range(0);
  auto opt = Optimizer::Create(spec);
  if (!opt.ok()) {
    state.SkipWithError(std::string(opt.status().message()).c_str());
    return;
  }
  std::vector<float> params = RandomFloats(n, 1, 0.1f);
  const std::vector<float> grad = RandomFloats(n, 2, 0.01f);
  OptimizerState s = (*opt)->NewState(n);
  for (auto _ : state) {
    (*opt)->Apply(absl::MakeSpan(params), grad.data(), 1.0f, &s);
    benchmark::DoNotOptimize(params.data());
    benchmark::ClobberMemory();
  }
  SetCounters(state, n, bytes_per_float);
}

void BM_SgdMomentum(benchmark::State& state) {
  OptimizerSpec spec;
  spec.set_kind(SGD);
  spec.set_learning_rate(0.01f);
  spec.set_momentum(0.9f);
  spec.set_weight_decay(1e-4f);
  RunApply(state, spec, 20);
}

void BM_Sgd(benchmark::State& state) {
  OptimizerSpec spec;
  spec.set_kind(SGD);
  spec.set_learning_rate(0.01f);
  RunApply(state, spec, 12);
}

void BM_Adam(benchmark::State& state) {
  OptimizerSpec spec;
  spec.set_kind(ADAM);
  spec.set_learning_rate(1e-3f);
  RunApply(state, spec, 28);
}

// The BSP aggregation: one worker's gradient added into the running sum.
void BM_GradientSum(benchmark::State& state) {
  const size_t n = state.range(0);
  std::vector<float> acc = RandomFloats(n, 3, 0.01f);
  const std::vector<float> g = RandomFloats(n, 4, 0.01f);
  for (auto _ : state) {
    AddInto(absl::MakeSpan(acc), g.data());
    benchmark::DoNotOptimize(acc.data());
    benchmark::ClobberMemory();
  }
  SetCounters(state, n, 12);
}

#define PS_SIZES Arg(1 << 20)->Arg(4 << 20)->Arg(16 << 20)->Arg(64 << 20)
BENCHMARK(BM_Memcpy)->PS_SIZES;
BENCHMARK(BM_Sgd)->PS_SIZES;
BENCHMARK(BM_SgdMomentum)->PS_SIZES;
BENCHMARK(BM_Adam)->PS_SIZES;
BENCHMARK(BM_GradientSum)->PS_SIZES;
#undef PS_SIZES

}  // namespace
}  // namespace ps
