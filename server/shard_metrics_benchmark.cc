// The cost of one /metrics scrape of a shard holding 10 jobs: ShardMetrics
// Collect (Shard::Stats, each chunk's mutex in turn) plus the text
// rendering, without HTTP. Jobs are the demo's MLP (784-256-128-10, 2
// workers, BSP) cut at partition_bytes (range arg), each with one step
// applied so that every histogram has samples.
//
//   bazel run -c opt //server:shard_metrics_benchmark
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "prometheus/text_serializer.h"
#include "server/shard.h"
#include "server/shard_metrics.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace shard_test {
namespace {

constexpr int kJobs = 10;

JobSpec MlpSpec(uint64_t partition_bytes) {
  JobSpec s = Spec(BSP, 2);
  s.clear_tensors();
  s.set_partition_bytes(partition_bytes);
  const int dims[][2] = {{784, 256}, {256, 128}, {128, 10}};
  for (int l = 0; l < 3; ++l) {
    TensorSpec* w = s.add_tensors();
    w->set_name(absl::StrCat("w", l));
    w->add_shape(dims[l][0]);
    w->add_shape(dims[l][1]);
    w->mutable_init()->set_kind(GLOROT_UNIFORM);
    TensorSpec* b = s.add_tensors();
    b->set_name(absl::StrCat("b", l));
    b->add_shape(dims[l][1]);
    b->mutable_init()->set_kind(ZEROS);
  }
  return s;
}

// A shard with kJobs jobs, one step pushed by both workers.
std::unique_ptr<Shard> ShardWithJobs(uint64_t partition_bytes, int* chunks) {
  auto shard = std::make_unique<Shard>(Options(0));
  for (int j = 0; j < kJobs; ++j) {
    const RegisterJobRequest reg =
        Registration(absl::StrCat("job-", j), MlpSpec(partition_bytes));
    RegisterJobResponse resp;
    if (!shard->RegisterJob(reg, &resp).ok()) return nullptr;
    *chunks = reg.placement().chunks_size();
    std::vector<uint32_t> all;
    for (int c = 0; c < reg.placement().chunks_size(); ++c) all.push_back(c);
    for (uint32_t w = 0; w < 2; ++w) {
      PushRequest push = PushRequestFor<PushRequest>(reg, w, 0, all, 0);
      PushResponse pr;
      if (!shard->Push(push, &pr).ok()) return nullptr;
    }
  }
  return shard;
}

void BM_ScrapeTenJobs(benchmark::State& state) {
  int chunks = 0;
  std::unique_ptr<Shard> shard =
      ShardWithJobs(static_cast<uint64_t>(state.range(0)), &chunks);
  if (shard == nullptr) {
    state.SkipWithError("registration failed");
    return;
  }
  ShardMetrics metrics(shard.get());
  size_t bytes = 0;
  for (auto _ : state) {
    std::string text =
        prometheus::TextSerializer().Serialize(metrics.Collect());
    bytes = text.size();
    benchmark::DoNotOptimize(text);
  }
  state.counters["chunks_per_job"] = chunks;
  state.counters["text_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_ScrapeTenJobs)
    ->Arg(262144)
    ->Arg(16384)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace shard_test
}  // namespace ps
