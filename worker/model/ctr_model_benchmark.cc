// CPU throughput of the CTR model step (CtrReplica): B examples x 26
// single-valued fields, dim 16, 13 dense features, MLP [256, 128] -> 1, ids
// Zipf-distributed per field (log-uniform ranks over 10^4 per field, as in
// embedding_bag_benchmark.cc), on one CpuBackend with one OpenBLAS thread:
//   BM_CtrTrainStep    Prepare (id de-duplication, dense copy) +
//                      ComputeGradient (lookup, MLP forward and backward,
//                      loss, row gradients): what a worker computes per step;
//   BM_CtrPredict      Prepare + Predict: evaluation.
//
//   bazel run --config=opt //worker/model:ctr_model_benchmark
//
// items_per_second is examples/s; GFLOPs counts the MLP's GEMMs only (2
// FLOPs per multiply-add: forward, weight gradient and input gradient for
// every layer, the input gradient feeding the embedding rows). The batches
// rotate over 8 seeds, so de-duplication sees fresh ids. Rates use wall time:
// on a shared machine, compare runs taken side by side.

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/model_spec.h"
#include "worker/backend/cpu/cpu_backend.h"
#include "worker/data/ctr_example.h"
#include "worker/model/ctr_model.h"
#include "worker/model/testing/model_test_util.h"

namespace ps {
namespace {

constexpr int kDim = 16;
constexpr double kFieldCardinality = 1e4;
constexpr int kBatches = 8;

ModelSpec CriteoSpec() {
  ModelSpec s;
  s.mutable_ctr()->set_table("emb");
  s.mutable_ctr()->set_embedding_dim(kDim);
  s.mutable_ctr()->add_hidden(256);
  s.mutable_ctr()->add_hidden(128);
  return s;
}

CtrBatch ZipfBatch(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::normal_distribution<float> normal;
  CtrBatch b;
  b.Resize(n);
  for (size_t i = 0; i < n; ++i) {
    b.labels[i] = static_cast<float>(rng() % 2);
    for (int j = 0; j < kCtrDenseFeatures; ++j) {
      b.dense[i * kCtrDenseFeatures + j] = std::abs(normal(rng));
    }
    for (int f = 0; f < kCtrCategoricalFields; ++f) {
      // Rank ~ exp(U * ln V): P(rank) ~ 1 / rank, Zipf with exponent 1.
      const auto rank =
          static_cast<uint64_t>(std::exp(u(rng) * std::log(kFieldCardinality)));
      b.ids[i * kCtrCategoricalFields + f] = CtrId(f, rank);
    }
  }
  return b;
}

double TrainFlops(const std::vector<uint32_t>& widths, double batch) {
  double flops = 0;
  for (size_t l = 0; l + 1 < widths.size(); ++l) {
    flops += 2 * 3 * batch * widths[l] * widths[l + 1];
  }
  return flops;
}

void Run(benchmark::State& state, bool train) {
  const size_t batch = static_cast<size_t>(state.range(0));
  absl::StatusOr<std::unique_ptr<CpuBackend>> cpu = CpuBackend::Create(0, 1);
  if (!cpu.ok()) return state.SkipWithError("CpuBackend::Create failed");
  const ModelSpec spec = CriteoSpec();
  absl::StatusOr<std::unique_ptr<CtrReplica>> model =
      CtrReplica::Create(spec, cpu->get(), batch);
  if (!model.ok()) return state.SkipWithError("CtrReplica::Create failed");
  CtrReplica& m = **model;
  std::vector<CtrBatch> batches;
  for (int i = 0; i < kBatches; ++i) batches.push_back(ZipfBatch(batch, i + 1));
  const std::vector<float> params = InitParameters(m.tensors(), 1);
  // Rows for the largest possible batch; values do not affect the cost.
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 0.01f);
  std::vector<float> rows(batch * kCtrCategoricalFields * kDim);
  for (float& x : rows) x = normal(rng);
  std::vector<float> grad(m.num_parameters()), row_grads(rows.size()),
      probs(batch);
  double loss = 0;
  int64_t unique = 0;
  int next = 0;
  for (auto _ : state) {
    if (!m.Prepare(batches[next]).ok()) {
      return state.SkipWithError("Prepare failed");
    }
    unique += static_cast<int64_t>(m.num_unique());
    const absl::Status s =
        train ? m.ComputeGradient(params.data(), rows.data(), grad.data(),
                                  row_grads.data(), &loss,
                                  1.0f / static_cast<float>(batch))
              : m.Predict(params.data(), rows.data(), probs.data());
    if (!s.ok()) return state.SkipWithError("step failed");
    benchmark::DoNotOptimize(grad.data());
    benchmark::DoNotOptimize(probs.data());
    next = (next + 1) % kBatches;
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(batch));
  state.counters["unique_per_batch"] =
      static_cast<double>(unique) / std::max<int64_t>(state.iterations(), 1);
  const double flops =
      TrainFlops(ModelLayerWidths(spec), batch) / (train ? 1.0 : 3.0);
  state.counters["GFLOPs"] = benchmark::Counter(
      flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_CtrTrainStep(benchmark::State& state) { Run(state, true); }
BENCHMARK(BM_CtrTrainStep)->ArgName("batch")->Arg(512)->UseRealTime();

void BM_CtrPredict(benchmark::State& state) { Run(state, false); }
BENCHMARK(BM_CtrPredict)->ArgName("batch")->Arg(512)->UseRealTime();

}  // namespace
}  // namespace ps
