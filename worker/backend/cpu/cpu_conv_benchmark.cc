// The CPU backend's convolution and pooling ops (Im2Col, Col2Im, MaxPool,
// MaxPoolBackward) at the built-in CNN's shapes (configs/jobs/
// fashion_cnn.pbtxt, batch 64), in GB/s of the bytes each op must move (its
// output written, its input read once), next to memcpy of the same bytes in
// the same binary: an op near memcpy's rate is bandwidth-bound, one far below
// it pays for index arithmetic or poor locality.
//
//   bazel run --config=opt //worker/backend/cpu:cpu_conv_benchmark
//
// Arguments: batch, height, width, channels, kernel (or pool).

#include <cstring>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "worker/backend/cpu/cpu_backend.h"

namespace ps {
namespace {

enum class Op { kIm2Col, kCol2Im, kMaxPool, kMaxPoolBackward };

ImageShape ShapeOf(const benchmark::State& state) {
  return ImageShape{
      static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
      static_cast<int>(state.range(2)), static_cast<int>(state.range(3))};
}

size_t Elements(const ImageShape& s) {
  return static_cast<size_t>(s.batch) * s.height * s.width * s.channels;
}

std::vector<float> Random(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

void RunOp(benchmark::State& state, Op op) {
  const ImageShape s = ShapeOf(state);
  const int k = static_cast<int>(state.range(4));
  absl::StatusOr<std::unique_ptr<CpuBackend>> cpu = CpuBackend::Create(0, 1);
  if (!cpu.ok()) return state.SkipWithError("CpuBackend::Create failed");
  const size_t image = Elements(s);
  const size_t cols = image * k * k;
  const size_t pooled = image / (k * k);
  std::vector<float> x = Random(image, 1);
  std::vector<float> big(op == Op::kCol2Im ? cols : image);
  if (op == Op::kCol2Im) big = Random(cols, 2);
  std::vector<float> out(op == Op::kIm2Col ? cols : image);
  std::vector<float> small = Random(pooled, 3);
  std::vector<int32_t> arg(pooled);
  (*cpu)->MaxPool(s, k, x.data(), small.data(), arg.data());
  size_t bytes = 0;
  for (auto _ : state) {
    switch (op) {
      case Op::kIm2Col:
        (*cpu)->Im2Col(s, k, x.data(), out.data());
        bytes = (image + cols) * sizeof(float);
        break;
      case Op::kCol2Im:
        (*cpu)->Col2Im(s, k, big.data(), out.data());
        bytes = (image + cols) * sizeof(float);
        break;
      case Op::kMaxPool:
        (*cpu)->MaxPool(s, k, x.data(), small.data(), arg.data());
        bytes = (image + 2 * pooled) * sizeof(float);
        break;
      case Op::kMaxPoolBackward:
        (*cpu)->MaxPoolBackward(s, k, arg.data(), small.data(), out.data());
        bytes = (image + 2 * pooled) * sizeof(float);
        break;
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::DoNotOptimize(small.data());
  }
  if (!(*cpu)->Synchronize().ok()) return state.SkipWithError("op failed");
  state.SetBytesProcessed(state.iterations() * bytes);
}

void BM_Im2Col(benchmark::State& state) { RunOp(state, Op::kIm2Col); }
void BM_Col2Im(benchmark::State& state) { RunOp(state, Op::kCol2Im); }
void BM_MaxPool(benchmark::State& state) { RunOp(state, Op::kMaxPool); }
void BM_MaxPoolBackward(benchmark::State& state) {
  RunOp(state, Op::kMaxPoolBackward);
}

// conv1 (28x28x1, 5x5) and conv2 (14x14x32, 5x5) at batch 64.
#define CONV_SHAPES()                 \
  ArgNames({"n", "h", "w", "c", "k"}) \
      ->Args({64, 28, 28, 1, 5})      \
      ->Args({64, 14, 14, 32, 5})     \
      ->UseRealTime()
// pool 1 (28x28x32) and pool 2 (14x14x64) at batch 64.
#define POOL_SHAPES()                    \
  ArgNames({"n", "h", "w", "c", "pool"}) \
      ->Args({64, 28, 28, 32, 2})        \
      ->Args({64, 14, 14, 64, 2})        \
      ->UseRealTime()

BENCHMARK(BM_Im2Col)->CONV_SHAPES();
BENCHMARK(BM_Col2Im)->CONV_SHAPES();
BENCHMARK(BM_MaxPool)->POOL_SHAPES();
BENCHMARK(BM_MaxPoolBackward)->POOL_SHAPES();

// The bound: memcpy of `bytes` (read + write counted, like the ops above).
void BM_Memcpy(benchmark::State& state) {
  const size_t floats = static_cast<size_t>(state.range(0)) / 2;
  std::vector<float> src = Random(floats, 4), dst(floats);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), floats * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * floats * sizeof(float));
}
// The bytes of Im2Col conv1 / conv2 and of pool 1 at batch 64.
BENCHMARK(BM_Memcpy)
    ->ArgName("floats")
    ->Arg(64 * 28 * 28 * 26)
    ->Arg(64 * 14 * 14 * 32 * 26)
    ->Arg(64 * 28 * 28 * 32 * 3 / 2)
    ->UseRealTime();

}  // namespace
}  // namespace ps
