// Benchmark of the per-row optimizers: updates of dim-16 rows, as a shard
// applies a sparse push (one update per unique id, in the order the ids
// arrived).
//
//   bazel run -c opt --config=opt //server/sparse:row_optimizer_benchmark --
//       --benchmark_min_time=0.2   (one command line)
//
// Each iteration updates a batch of 4096 distinct rows drawn at random from
// a table of range(0) rows: 1Ki rows stay in cache (the update's own cost),
// 1Mi rows do not (a push to a large table: each row and its state are
// cache misses). The BM_*Scoped variants hold one ScopedFlushDenormals per
// batch and call UpdateInFlushScope; the others call Update, which sets and
// restores the floating-point mode per row. rows/s counts updated rows.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "benchmark/benchmark.h"
#include "server/optimizer.h"
#include "server/sparse/row_optimizer.h"

namespace ps {
namespace {

constexpr int kDim = 16;
constexpr int kBatchRows = 4096;

uint64_t SplitMix(uint64_t* z) {
  uint64_t x = (*z += 0x9E3779B97F4A7C15ull);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [-scale, scale): realistic magnitudes, no denormals.
float RandomFloat(uint64_t* z, float scale) {
  return scale * (static_cast<float>(SplitMix(z) >> 40) * 0x1.0p-23f - 1.0f);
}

RowOptimizerOptions Options(RowOptimizerKind kind) {
  RowOptimizerOptions o;
  o.kind = kind;
  o.learning_rate = 0.01f;
  if (kind == RowOptimizerKind::kFtrl) {
    o.l1 = 0.01f;
    o.l2 = 0.01f;
  }
  if (kind == RowOptimizerKind::kAdagrad) o.initial_accumulator = 0.1f;
  return o;
}

void Run(benchmark::State& state, RowOptimizerKind kind, bool scoped) {
  auto created = RowOptimizer::Create(Options(kind));
  if (!created.ok()) {
    state.SkipWithError(std::string(created.status().message()).c_str());
    return;
  }
  const RowOptimizer& opt = **created;
  const size_t rows = state.range(0);
  const size_t sf = opt.StateFloatsPerRow(kDim);
  uint64_t z = 1;
  std::vector<float> table(rows * kDim), states(rows * sf, 0.0f);
  for (float& x : table) x = RandomFloat(&z, 0.1f);
  std::vector<float> grads(kBatchRows * kDim);
  for (float& x : grads) x = RandomFloat(&z, 0.01f);
  // Distinct rows in random order (a partial Fisher-Yates shuffle).
  std::vector<uint32_t> perm(rows);
  for (size_t i = 0; i < rows; ++i) perm[i] = static_cast<uint32_t>(i);
  const size_t batch = std::min<size_t>(kBatchRows, rows);
  for (size_t i = 0; i < batch; ++i) {
    std::swap(perm[i], perm[i + SplitMix(&z) % (rows - i)]);
  }
  for (auto _ : state) {
    if (scoped) {
      ScopedFlushDenormals flush;
      for (size_t b = 0; b < batch; ++b) {
        const size_t r = perm[b];
        opt.UpdateInFlushScope(&table[r * kDim], &states[r * sf],
                               &grads[b * kDim], kDim);
      }
    } else {
      for (size_t b = 0; b < batch; ++b) {
        const size_t r = perm[b];
        opt.Update(&table[r * kDim], &states[r * sf], &grads[b * kDim], kDim);
      }
    }
    benchmark::DoNotOptimize(table.data());
    benchmark::ClobberMemory();
  }
  state.counters["rows/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * batch,
                         benchmark::Counter::kIsRate);
}

void BM_Sgd(benchmark::State& s) { Run(s, RowOptimizerKind::kSgd, false); }
void BM_Adagrad(benchmark::State& s) {
  Run(s, RowOptimizerKind::kAdagrad, false);
}
void BM_Ftrl(benchmark::State& s) { Run(s, RowOptimizerKind::kFtrl, false); }
void BM_Adam(benchmark::State& s) { Run(s, RowOptimizerKind::kAdam, false); }
void BM_SgdScoped(benchmark::State& s) { Run(s, RowOptimizerKind::kSgd, true); }
void BM_AdagradScoped(benchmark::State& s) {
  Run(s, RowOptimizerKind::kAdagrad, true);
}
void BM_FtrlScoped(benchmark::State& s) {
  Run(s, RowOptimizerKind::kFtrl, true);
}
void BM_AdamScoped(benchmark::State& s) {
  Run(s, RowOptimizerKind::kAdam, true);
}

#define PS_TABLE_ROWS Arg(1 << 10)->Arg(1 << 20)
BENCHMARK(BM_Sgd)->PS_TABLE_ROWS;
BENCHMARK(BM_SgdScoped)->PS_TABLE_ROWS;
BENCHMARK(BM_Adagrad)->PS_TABLE_ROWS;
BENCHMARK(BM_AdagradScoped)->PS_TABLE_ROWS;
BENCHMARK(BM_Ftrl)->PS_TABLE_ROWS;
BENCHMARK(BM_FtrlScoped)->PS_TABLE_ROWS;
BENCHMARK(BM_Adam)->PS_TABLE_ROWS;
BENCHMARK(BM_AdamScoped)->PS_TABLE_ROWS;
#undef PS_TABLE_ROWS

}  // namespace
}  // namespace ps
