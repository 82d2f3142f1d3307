// Helpers shared by device_group_test and device_group_gpu_test: the mean
// gradient of a fixed MLP and batch on some devices, and a comparison to
// float rounding.
#ifndef WORKER_TRAINER_TESTING_DEVICE_GROUP_TEST_UTIL_H_
#define WORKER_TRAINER_TESTING_DEVICE_GROUP_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/model_spec.h"
#include "gtest/gtest.h"
#include "worker/client/testing/fake_parameter_client.h"
#include "worker/data/dataset.h"
#include "worker/trainer/device_group.h"

namespace ps {

inline ModelSpec Mlp(uint32_t in, std::vector<uint32_t> hidden,
                     uint32_t classes) {
  ModelSpec spec;
  spec.mutable_mlp()->set_input_dim(in);
  for (uint32_t h : hidden) spec.mutable_mlp()->add_hidden(h);
  spec.mutable_mlp()->set_num_classes(classes);
  return spec;
}

struct Result {
  std::vector<float> grad;
  double loss = 0;
  size_t correct = 0;
};

// The mean gradient of the first n synthetic examples on `devices`.
inline Result Gradient(const std::vector<std::string>& devices,
                       const std::vector<double>& weights, size_t n) {
  const ModelSpec spec = Mlp(784, {32, 16}, 10);
  DeviceGroup::Options options;
  options.devices = devices;
  options.weights = weights;
  options.max_batch = 64;
  absl::StatusOr<std::unique_ptr<DeviceGroup>> group =
      DeviceGroup::Create(spec, options);
  EXPECT_TRUE(group.ok()) << group.status();
  if (!group.ok()) return {};
  const std::vector<float> params = *InitialParameters(5, ModelTensors(spec));
  TrainTestData data = MakeSyntheticData(n, 1, 3);
  std::vector<float> x(n * 784);
  std::vector<int32_t> y(n);
  data.train->CopyRange(0, n, x.data(), y.data());
  Result r;
  // Whatever the output buffer held must not leak into the result.
  r.grad.assign((*group)->num_parameters(),
                std::numeric_limits<float>::quiet_NaN());
  const absl::Status s = (*group)->ComputeGradient(
      params.data(), x.data(), y.data(), n, r.grad.data(), &r.loss, &r.correct);
  EXPECT_TRUE(s.ok()) << s;
  return r;
}

inline void ExpectClose(const Result& a, const Result& b) {
  ASSERT_EQ(a.grad.size(), b.grad.size());
  double diff2 = 0, norm2 = 0, max_abs = 0, max_diff = 0;
  for (size_t i = 0; i < a.grad.size(); ++i) {
    const double d = double(a.grad[i]) - b.grad[i];
    diff2 += d * d;
    norm2 += double(a.grad[i]) * a.grad[i];
    max_abs = std::max(max_abs, std::abs(double(a.grad[i])));
    max_diff = std::max(max_diff, std::abs(d));
  }
  ASSERT_GT(norm2, 0.0);
  EXPECT_LE(std::sqrt(diff2 / norm2), 1e-6);
  EXPECT_LE(max_diff, 1e-6 * max_abs);
  EXPECT_NEAR(a.loss, b.loss, 1e-6 * std::abs(a.loss));
  EXPECT_EQ(a.correct, b.correct);
}

}  // namespace ps

#endif  // WORKER_TRAINER_TESTING_DEVICE_GROUP_TEST_UTIL_H_
