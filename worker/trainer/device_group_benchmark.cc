// The cost of the device group around the model: a step of the MLP
// 784-256-128-10 at batch 64 driven directly on the calling thread, and
// through DeviceGroup with 1 and 2 CPU replicas (thread hand-off, split,
// host reduce and 1/n scaling included).
//
//   bazel run -c opt --config=opt //worker/trainer:device_group_benchmark
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/model_spec.h"
#include "worker/backend/backend_factory.h"
#include "worker/client/testing/fake_parameter_client.h"
#include "worker/data/dataset.h"
#include "worker/model/model.h"
#include "worker/trainer/device_group.h"

namespace ps {
namespace {

constexpr size_t kBatch = 64;

ModelSpec Spec() {
  ModelSpec spec;
  spec.mutable_mlp()->set_input_dim(784);
  spec.mutable_mlp()->add_hidden(256);
  spec.mutable_mlp()->add_hidden(128);
  spec.mutable_mlp()->set_num_classes(10);
  return spec;
}

struct Inputs {
  std::vector<float> params;
  std::vector<float> x;
  std::vector<int32_t> y;
};

Inputs MakeInputs() {
  Inputs in;
  in.params = *InitialParameters(1, ModelTensors(Spec()));
  TrainTestData data = MakeSyntheticData(kBatch, 1, 2);
  in.x.resize(kBatch * 784);
  in.y.resize(kBatch);
  data.train->CopyRange(0, kBatch, in.x.data(), in.y.data());
  return in;
}

void BM_ModelDirect(benchmark::State& state) {
  const Inputs in = MakeInputs();
  auto backend = CreateBackend("cpu:0", 1);
  auto model = Model::Create(Spec(), backend->get(), kBatch);
  std::vector<float> grad((*model)->num_parameters());
  double loss;
  size_t correct;
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        (*model)->ComputeGradient(in.params.data(), in.x.data(), in.y.data(),
                                  kBatch, grad.data(), &loss, &correct));
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_ModelDirect)->UseRealTime();

void BM_DeviceGroup(benchmark::State& state) {
  const Inputs in = MakeInputs();
  DeviceGroup::Options options;
  options.devices.clear();
  for (int i = 0; i < state.range(0); ++i) {
    options.devices.push_back("cpu:" + std::to_string(i));
  }
  options.max_batch = kBatch;
  auto group = DeviceGroup::Create(Spec(), options);
  std::vector<float> grad((*group)->num_parameters());
  double loss;
  size_t correct;
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        (*group)->ComputeGradient(in.params.data(), in.x.data(), in.y.data(),
                                  kBatch, grad.data(), &loss, &correct));
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_DeviceGroup)->Arg(1)->Arg(2)->UseRealTime();

}  // namespace
}  // namespace ps
