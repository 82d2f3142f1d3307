// CPU embedding-bag throughput for the CTR step: B examples x 26
// single-valued fields, dim 16, ids Zipf-distributed per field (log-uniform
// ranks over 10^4 per field, ~8k unique ids at B = 512):
//   BM_IdDedup             per-batch de-duplication, ids/s;
//   BM_EmbeddingBagStep    EmbeddingBagForward (into a [B x 13 + 26 * dim]
//                          activation, after 13 dense columns) +
//                          EmbeddingBagBackward, on the CpuBackend;
//   BM_Memcpy              a memcpy touching as many bytes as one step does,
//                          the ceiling the step's GB/s reads against.
//
//   bazel run --config=opt //worker/model:embedding_bag_benchmark
//
// Counters. rows_per_second: embedding rows (dim floats) pooled or
// accumulated per second, i.e. (occurrences + occurrences) per step: each
// occurrence is gathered once forward and scattered once backward.
// GBps: bytes read + written per second by the step (table rows gathered,
// outputs written, grad_out read, row gradients written, and the int32
// index arrays), counted the same way for the memcpy (2 x its size).
// Rates use wall time: on a shared machine, compare runs taken side by side.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "worker/backend/cpu/cpu_backend.h"
#include "worker/model/id_dedup.h"

namespace ps {
namespace {

constexpr int kFields = 26;
constexpr int kDenseFeatures = 13;
constexpr int kDim = 16;
constexpr double kFieldCardinality = 1e4;

// B x 26 ids, row-major; field f's ids live in their own range.
std::vector<uint64_t> CtrIds(int batch, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<uint64_t> ids(static_cast<size_t>(batch) * kFields);
  for (int b = 0; b < batch; ++b) {
    for (int f = 0; f < kFields; ++f) {
      // Rank ~ exp(U * ln V): P(rank) ~ 1 / rank, Zipf with exponent 1.
      const auto rank =
          static_cast<uint64_t>(std::exp(u(rng) * std::log(kFieldCardinality)));
      ids[static_cast<size_t>(b) * kFields + f] =
          (static_cast<uint64_t>(f) << 40) | rank;
    }
  }
  return ids;
}

void BM_IdDedup(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  // Several batches in turn, so the table sees fresh ids each call.
  constexpr int kBatches = 8;
  std::vector<std::vector<uint64_t>> batches;
  for (int i = 0; i < kBatches; ++i) batches.push_back(CtrIds(batch, i + 1));
  IdDedup dedup;
  int64_t ids = 0, unique = 0;
  int next = 0;
  for (auto _ : state) {
    if (!dedup.DedupSingle(batches[next]).ok()) {
      return state.SkipWithError("DedupSingle failed");
    }
    ids += dedup.num_indices();
    unique += dedup.num_unique();
    next = (next + 1) % kBatches;
  }
  state.SetItemsProcessed(ids);  // items_per_second is ids/s
  state.counters["unique_per_batch"] =
      static_cast<double>(unique) / std::max<int64_t>(state.iterations(), 1);
}
BENCHMARK(BM_IdDedup)->ArgName("batch")->Arg(512)->Arg(4096)->UseRealTime();

// Bytes one forward + backward reads and writes (see the file comment).
double StepBytes(const EmbeddingBatch& b) {
  const double row = kDim * sizeof(float);
  const double floats = 2.0 * b.num_indices * row  // gather fwd, grad_out bwd
                        + b.num_bags * row         // out
                        + b.num_rows * row;        // grad_rows
  const double ints = sizeof(int32_t) * (2.0 * (b.num_bags + 1)  // offsets
                                         + 2.0 * b.num_indices   // indices, CSR
                                         + (b.num_rows + 1.0));  // row_offsets
  return floats + ints;
}

void BM_EmbeddingBagStep(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  const Pooling pooling = state.range(1) == 0 ? Pooling::kSum : Pooling::kMean;
  absl::StatusOr<std::unique_ptr<CpuBackend>> cpu = CpuBackend::Create(0, 1);
  if (!cpu.ok()) return state.SkipWithError("CpuBackend::Create failed");
  IdDedup dedup;
  if (!dedup.DedupSingle(CtrIds(batch, 1)).ok()) {
    return state.SkipWithError("DedupSingle failed");
  }
  const EmbeddingBatch b = dedup.batch();
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> rows(static_cast<size_t>(b.num_rows) * kDim);
  for (float& x : rows) x = u(rng);
  const int stride = kDenseFeatures + kFields * kDim;
  std::vector<float> activation(static_cast<size_t>(batch) * stride);
  std::vector<float> grad_out(activation.size());
  for (float& x : grad_out) x = u(rng);
  std::vector<float> grad_rows(rows.size());
  for (auto _ : state) {
    (*cpu)->EmbeddingBagForward(pooling, b, kDim, rows.data(), kFields, stride,
                                activation.data() + kDenseFeatures);
    (*cpu)->EmbeddingBagBackward(pooling, b, kDim,
                                 grad_out.data() + kDenseFeatures, kFields,
                                 stride, grad_rows.data());
    if (!(*cpu)->Synchronize().ok()) {
      return state.SkipWithError("EmbeddingBag failed");
    }
    benchmark::DoNotOptimize(activation.data());
    benchmark::DoNotOptimize(grad_rows.data());
  }
  state.counters["unique_rows"] = b.num_rows;
  state.counters["rows_per_second"] = benchmark::Counter(
      2.0 * b.num_indices, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GBps"] = benchmark::Counter(
      StepBytes(b) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_EmbeddingBagStep)
    ->ArgNames({"batch", "mean"})
    ->ArgsProduct({{512}, {0, 1}})
    ->UseRealTime();

// memcpy of half a step's bytes: it reads and writes them, so it touches
// as many bytes as the step.
void BM_Memcpy(benchmark::State& state) {
  IdDedup dedup;
  if (!dedup.DedupSingle(CtrIds(static_cast<int>(state.range(0)), 1)).ok()) {
    return state.SkipWithError("DedupSingle failed");
  }
  const double bytes = StepBytes(dedup.batch());
  std::vector<char> src(static_cast<size_t>(bytes / 2), 1), dst(src.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.counters["GBps"] = benchmark::Counter(
      2.0 * src.size() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Memcpy)->ArgName("batch")->Arg(512)->UseRealTime();

}  // namespace
}  // namespace ps
