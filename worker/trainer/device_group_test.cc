#include "worker/trainer/device_group.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/backend/backend_factory.h"
#include "worker/client/testing/fake_parameter_client.h"
#include "worker/data/dataset.h"
#include "worker/data/internal/rng.h"
#include "worker/trainer/testing/device_group_test_util.h"

namespace ps {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

struct SplitCase {
  size_t n;
  std::vector<double> weights;
  std::vector<size_t> want;
};

class SplitBatchTest : public ::testing::TestWithParam<SplitCase> {};

TEST_P(SplitBatchTest, LargestRemainder) {
  const SplitCase& c = GetParam();
  std::vector<size_t> counts(c.weights.size(), 99);
  SplitBatch(c.n, c.weights, absl::MakeSpan(counts));
  EXPECT_THAT(counts, ElementsAreArray(c.want));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SplitBatchTest,
    ::testing::Values(SplitCase{64, {1}, {64}}, SplitCase{64, {1, 1}, {32, 32}},
                      SplitCase{64, {3, 1}, {48, 16}},
                      SplitCase{65, {1, 1}, {33, 32}},  // tie: lower index
                      SplitCase{10, {1, 1, 1}, {4, 3, 3}},
                      SplitCase{7, {0.5, 0.25, 0.25}, {3, 2, 2}},
                      SplitCase{3, {1, 1, 1, 1, 1}, {1, 1, 1, 0, 0}},
                      SplitCase{100, {1, 2, 3, 4}, {10, 20, 30, 40}},
                      SplitCase{0, {1, 2}, {0, 0}},
                      SplitCase{5, {1e-9, 1}, {0, 5}}));

TEST(SplitBatchTest, EveryExampleOnceAndWithinOneOfTheExactShare) {
  Rng rng(11);
  for (int trial = 0; trial < 500; ++trial) {
    const size_t k = 1 + rng.UniformInt(8);
    const size_t n = rng.UniformInt(300);
    std::vector<double> w(k);
    double total = 0;
    for (double& x : w) total += (x = 0.01 + rng.Uniform());
    std::vector<size_t> counts(k);
    SplitBatch(n, w, absl::MakeSpan(counts));
    EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), size_t{0}), n);
    for (size_t i = 0; i < k; ++i) {
      EXPECT_LT(std::abs(double(counts[i]) - n * w[i] / total), 1.0);
    }
  }
}

TEST(DeviceGroupTest, TwoReplicasGiveTheSingleDeviceGradient) {
  const Result one = Gradient({"cpu:0"}, {}, 64);
  const Result two = Gradient({"cpu:0", "cpu:1"}, {}, 64);
  ExpectClose(one, two);
}

TEST(DeviceGroupTest, CpuReplicasReduceOnTheHost) {
  DeviceGroup::Options options;
  options.devices = {"cpu:0", "cpu:1"};
  options.max_batch = 8;
  absl::StatusOr<std::unique_ptr<DeviceGroup>> group =
      DeviceGroup::Create(Mlp(4, {}, 2), options);
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_FALSE((*group)->reduces_on_devices());
}

TEST(DeviceGroupTest, WeightedSplitGivesTheEvenSplitGradient) {
  const Result even = Gradient({"cpu:0", "cpu:1"}, {}, 64);
  const Result weighted = Gradient({"cpu:0", "cpu:1"}, {3, 1}, 64);
  ExpectClose(even, weighted);
  // Three replicas, one of which gets no example of a 2-example batch.
  const Result one = Gradient({"cpu:0"}, {}, 2);
  const Result three = Gradient({"cpu:0", "cpu:1", "cpu:2"}, {1, 1, 1}, 2);
  ExpectClose(one, three);
  // Device 0 itself idle: {0, 2}.
  const Result skewed = Gradient({"cpu:0", "cpu:1"}, {0.01, 1}, 2);
  ExpectClose(one, skewed);
}

TEST(DeviceGroupTest, MeanOfTheModelsSumGradient) {
  // Against the model driven directly: the group divides by the batch.
  const ModelSpec spec = Mlp(784, {32, 16}, 10);
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateBackend("cpu:0", 1);
  ASSERT_TRUE(backend.ok());
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Create(spec, backend->get(), 64);
  ASSERT_TRUE(model.ok());
  const std::vector<float> params = *InitialParameters(5, ModelTensors(spec));
  TrainTestData data = MakeSyntheticData(64, 1, 3);
  std::vector<float> x(64 * 784);
  std::vector<int32_t> y(64);
  data.train->CopyRange(0, 64, x.data(), y.data());
  Result direct;
  direct.grad.resize((*model)->num_parameters());
  ASSERT_TRUE((*model)
                  ->ComputeGradient(params.data(), x.data(), y.data(), 64,
                                    direct.grad.data(), &direct.loss,
                                    &direct.correct)
                  .ok());
  for (float& g : direct.grad) g /= 64;
  ExpectClose(direct, Gradient({"cpu:0"}, {}, 64));
}

TEST(DeviceGroupTest, EvaluateMatchesTheGradientPassLoss) {
  const ModelSpec spec = Mlp(784, {32}, 10);
  DeviceGroup::Options options;
  options.devices = {"cpu:0", "cpu:1"};
  options.max_batch = 16;
  auto group = DeviceGroup::Create(spec, options);
  ASSERT_TRUE(group.ok()) << group.status();
  const std::vector<float> params = *InitialParameters(5, ModelTensors(spec));
  TrainTestData data = MakeSyntheticData(100, 1, 3);
  std::vector<float> x(100 * 784), grad((*group)->num_parameters());
  std::vector<int32_t> y(100);
  data.train->CopyRange(0, 100, x.data(), y.data());
  double eval_loss, grad_loss;
  size_t eval_correct, grad_correct;
  // 100 examples: more than max_batch, run in chunks.
  ASSERT_TRUE((*group)
                  ->Evaluate(params.data(), x.data(), y.data(), 100, &eval_loss,
                             &eval_correct)
                  .ok());
  ASSERT_TRUE((*group)
                  ->ComputeGradient(params.data(), x.data(), y.data(), 100,
                                    grad.data(), &grad_loss, &grad_correct)
                  .ok());
  EXPECT_NEAR(eval_loss, grad_loss, 1e-6 * grad_loss);
  EXPECT_EQ(eval_correct, grad_correct);
  EXPECT_GT(eval_loss, 0.0);
}

TEST(DeviceGroupTest, AlternatingTasksKeepTheirSlices) {
  // Gradients that leave a device idle, interleaved with evaluations on
  // device 0 only: a device that wakes late must not run a stale slice.
  const ModelSpec spec = Mlp(784, {8}, 10);
  DeviceGroup::Options options;
  options.devices = {"cpu:0", "cpu:1", "cpu:2"};
  options.max_batch = 4;
  auto group = DeviceGroup::Create(spec, options);
  ASSERT_TRUE(group.ok()) << group.status();
  const std::vector<float> params = *InitialParameters(5, ModelTensors(spec));
  TrainTestData data = MakeSyntheticData(4, 1, 3);
  std::vector<float> x(4 * 784), grad((*group)->num_parameters()), first;
  std::vector<int32_t> y(4);
  data.train->CopyRange(0, 4, x.data(), y.data());
  double first_loss = 0, first_eval = 0;
  for (int i = 0; i < 300; ++i) {
    double loss, eval_loss;
    size_t correct, eval_correct;
    ASSERT_TRUE((*group)
                    ->ComputeGradient(params.data(), x.data(), y.data(), 2,
                                      grad.data(), &loss, &correct)
                    .ok());
    ASSERT_TRUE((*group)
                    ->Evaluate(params.data(), x.data(), y.data(), 4, &eval_loss,
                               &eval_correct)
                    .ok());
    if (i == 0) {
      first = grad, first_loss = loss, first_eval = eval_loss;
    } else {
      ASSERT_EQ(grad, first) << "iteration " << i;
      ASSERT_EQ(loss, first_loss);
      ASSERT_EQ(eval_loss, first_eval);
    }
  }
}

TEST(DeviceGroupTest, ReportsBadLabelsWithTheDevice) {
  const ModelSpec spec = Mlp(4, {}, 3);
  DeviceGroup::Options options;
  options.devices = {"cpu:0", "cpu:1"};
  options.max_batch = 4;
  auto group = DeviceGroup::Create(spec, options);
  ASSERT_TRUE(group.ok()) << group.status();
  std::vector<float> params((*group)->num_parameters()), grad(params.size());
  std::vector<float> x(16);
  const std::vector<int32_t> y = {0, 1, 2, 7};  // 7 lands on cpu:1
  double loss;
  size_t correct;
  const absl::Status s = (*group)->ComputeGradient(
      params.data(), x.data(), y.data(), 4, grad.data(), &loss, &correct);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("device cpu:1"));
}

TEST(DeviceGroupTest, RejectsBadOptionsNamingTheField) {
  struct Case {
    std::vector<std::string> devices;
    std::vector<double> weights;
    size_t max_batch;
    std::string field;
  };
  for (const Case& c : std::vector<Case>{
           {{}, {}, 8, "devices"},
           {{"cpu:0", "cpu:0"}, {}, 8, "devices: \"cpu:0\" listed twice"},
           {{"cpu:0", "cpu:1"}, {1}, 8, "weights"},
           {{"cpu:0", "cpu:1"}, {1, 0}, 8, "weights[1]"},
           {{"cpu:0"}, {-1}, 8, "weights[0]"},
           {{"cpu:0"}, {}, 0, "max_batch"},
           {{"tpu:0"}, {}, 8, "tpu:0"},
       }) {
    DeviceGroup::Options options;
    options.devices = c.devices;
    options.weights = c.weights;
    options.max_batch = c.max_batch;
    const absl::Status s = DeviceGroup::Create(Mlp(4, {}, 3), options).status();
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr(c.field));
  }
  ModelSpec bad;
  DeviceGroup::Options options;
  options.max_batch = 8;
  EXPECT_FALSE(DeviceGroup::Create(bad, options).ok());
}

// The per-layer pipeline: the devices' gradient reduced layer by layer as
// each is done, with the hooks, against the whole-model reduce without.
struct HookedRun {
  std::vector<float> grad;
  std::vector<size_t> ready;                 // layer_ready order
  std::vector<bool> layer0_unwritten;        // at each layer_ready: fc0 NaN
  std::vector<std::vector<float>> at_ready;  // the layer's slice then
  size_t forwards = 0;                       // before_forward calls
};

HookedRun GradientWithHooks(const std::vector<std::string>& devices, size_t n,
                            bool hooks_on) {
  const ModelSpec spec = Mlp(784, {32, 16}, 10);
  DeviceGroup::Options options;
  options.devices = devices;
  options.max_batch = 64;
  std::unique_ptr<DeviceGroup> group = *DeviceGroup::Create(spec, options);
  const std::vector<float> params = *InitialParameters(5, ModelTensors(spec));
  TrainTestData data = MakeSyntheticData(n, 1, 3);
  std::vector<float> x(n * 784);
  std::vector<int32_t> y(n);
  data.train->CopyRange(0, n, x.data(), y.data());
  HookedRun r;
  r.grad.assign(group->num_parameters(),
                std::numeric_limits<float>::quiet_NaN());
  absl::Mutex mu;
  GradientHooks hooks;
  hooks.before_forward = [&](size_t) {
    absl::MutexLock lock(&mu);
    ++r.forwards;
    return absl::OkStatus();
  };
  hooks.layer_ready = [&](size_t l) {
    r.ready.push_back(l);
    const auto [offset, length] = group->LayerRange(l);
    r.at_ready.emplace_back(r.grad.begin() + offset,
                            r.grad.begin() + offset + length);
    r.layer0_unwritten.push_back(std::isnan(r.grad[0]));
  };
  double loss;
  size_t correct;
  const absl::Status s = group->ComputeGradient(
      params.data(), x.data(), y.data(), n, r.grad.data(), &loss, &correct,
      hooks_on ? &hooks : nullptr);
  EXPECT_TRUE(s.ok()) << s;
  return r;
}

TEST(DeviceGroupHooksTest, LayersReadyLastFirstWhileBackwardGoesOn) {
  const HookedRun r = GradientWithHooks({"cpu:0"}, 20, true);
  EXPECT_EQ(r.ready, (std::vector<size_t>{2, 1, 0}));
  EXPECT_EQ(r.forwards, 3u);
  // When the last layer was handed over, layer 0's gradient was not even
  // computed yet: the push starts before backward ends.
  EXPECT_EQ(r.layer0_unwritten, (std::vector<bool>{true, true, false}));
}

TEST(DeviceGroupHooksTest, PerLayerReduceIsBitwiseTheWholeModelOne) {
  for (const std::vector<std::string>& devices :
       std::vector<std::vector<std::string>>{{"cpu:0", "cpu:1"},
                                             {"cpu:0", "cpu:1", "cpu:2"}}) {
    for (size_t n : {2, 20, 64, 130}) {  // 2 < 3 devices: one has none
      SCOPED_TRACE(testing::Message() << devices.size() << " devices, n=" << n);
      const HookedRun off = GradientWithHooks(devices, n, false);
      const HookedRun on = GradientWithHooks(devices, n, true);
      EXPECT_EQ(on.ready, (std::vector<size_t>{2, 1, 0}));
      // Bitwise (memcmp: NaN-safe, and -0 vs +0 counts).
      ASSERT_EQ(on.grad.size(), off.grad.size());
      EXPECT_EQ(0, std::memcmp(on.grad.data(), off.grad.data(),
                               on.grad.size() * sizeof(float)));
      // Each layer was final when handed over.
      for (size_t i = 0; i < on.ready.size(); ++i) {
        const size_t l = on.ready[i];
        const ModelSpec spec = Mlp(784, {32, 16}, 10);
        size_t offset = 0;
        const std::vector<uint32_t> w = ModelLayerWidths(spec);
        for (size_t k = 0; k < l; ++k) offset += (w[k] + 1) * w[k + 1];
        EXPECT_EQ(0,
                  std::memcmp(on.at_ready[i].data(), off.grad.data() + offset,
                              on.at_ready[i].size() * sizeof(float)))
            << "layer " << l;
      }
    }
  }
}

TEST(DeviceGroupHooksTest, ForwardWaitErrorFailsTheStep) {
  const ModelSpec spec = Mlp(784, {32}, 10);
  DeviceGroup::Options options;
  options.devices = {"cpu:0", "cpu:1"};
  options.max_batch = 64;
  std::unique_ptr<DeviceGroup> group = *DeviceGroup::Create(spec, options);
  const std::vector<float> params = *InitialParameters(5, ModelTensors(spec));
  TrainTestData data = MakeSyntheticData(8, 1, 3);
  std::vector<float> x(8 * 784), grad(group->num_parameters());
  std::vector<int32_t> y(8);
  data.train->CopyRange(0, 8, x.data(), y.data());
  GradientHooks hooks;
  hooks.before_forward = [](size_t l) {
    return l == 1 ? absl::UnavailableError("shard 1 gone") : absl::OkStatus();
  };
  size_t ready = 0;
  hooks.layer_ready = [&](size_t) { ++ready; };
  double loss;
  size_t correct;
  const absl::Status s =
      group->ComputeGradient(params.data(), x.data(), y.data(), 8, grad.data(),
                             &loss, &correct, &hooks);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), testing::HasSubstr("shard 1 gone"));
  EXPECT_EQ(ready, 0u);
}

}  // namespace
}  // namespace ps
