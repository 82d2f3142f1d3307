// Benchmark of the worker's gradient encoding per chunk: top-k 1% with
// error feedback (selection, values, residual) and, for reference, dense
// BF16, on a chunk of the lab's 256 KiB partitions.
//
//   bazel run --config=opt //worker:gradient_encoder_benchmark --
//       --benchmark_min_time=0.2   (one command line)
//
// items_per_second counts gradient floats encoded.
#include <cstdint>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "proto/job.pb.h"
#include "worker/client/gradient_encoder.h"

namespace ps {
namespace {

constexpr uint64_t kChunkFloats = 65536;  // 256 KiB

void Encode(benchmark::State& state, WireFormat format, float fraction) {
  WireSpec wire;
  wire.set_format(format);
  if (fraction < 1.0f) wire.set_topk_fraction(fraction);
  GradientEncoder encoder(wire, {kChunkFloats});
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.01f);
  std::vector<float> gradient(kChunkFloats);
  for (float& g : gradient) g = normal(rng);
  EncodedChunk out;
  for (auto _ : state) {
    encoder.Encode(0, gradient, &out);
    benchmark::DoNotOptimize(out.data.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(kChunkFloats));
}

void BM_Topk1PercentFp32(benchmark::State& state) {
  Encode(state, FP32, 0.01f);
}
void BM_Topk1PercentBf16(benchmark::State& state) {
  Encode(state, BF16, 0.01f);
}
void BM_DenseBf16(benchmark::State& state) { Encode(state, BF16, 1.0f); }
BENCHMARK(BM_Topk1PercentFp32);
BENCHMARK(BM_Topk1PercentBf16);
BENCHMARK(BM_DenseBf16);

}  // namespace
}  // namespace ps
