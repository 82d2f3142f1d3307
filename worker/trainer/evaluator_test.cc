#include "worker/trainer/evaluator.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "proto/job.pb.h"
#include "worker/data/dataset.h"
#include "worker/trainer/device_group.h"

namespace ps {
namespace {

// A 2-feature, 2-class linear model; with W = identity and b = 0 it
// predicts the larger feature's index.
std::unique_ptr<DeviceGroup> LinearDevices() {
  ModelSpec model;
  model.mutable_mlp()->set_input_dim(2);
  model.mutable_mlp()->set_num_classes(2);
  DeviceGroup::Options options;
  options.max_batch = 8;
  absl::StatusOr<std::unique_ptr<DeviceGroup>> devices =
      DeviceGroup::Create(model, options);
  EXPECT_TRUE(devices.ok()) << devices.status();
  return devices.ok() ? *std::move(devices) : nullptr;
}

// Four examples, three labelled with the larger feature.
Dataset FourExamples() {
  absl::StatusOr<Dataset> d = Dataset::FromFeatures(
      {1, 0, /**/ 0, 1, /**/ 1, 0, /**/ 0, 2}, {0, 1, 1, 1}, 2, 2);
  EXPECT_TRUE(d.ok()) << d.status();
  return *std::move(d);
}

TEST(EvaluatorTest, AccuracyIsTheSameForEveryChunkSize) {
  std::unique_ptr<DeviceGroup> devices = LinearDevices();
  ASSERT_NE(devices, nullptr);
  ASSERT_EQ(devices->num_parameters(), 6u);  // W (2x2), then b (2)
  const std::vector<float> params = {1, 0, 0, 1, 0, 0};
  const Dataset test = FourExamples();
  for (size_t eval_batch : {1, 3, 4, 1000}) {
    Evaluator eval(&test, devices.get(), eval_batch, /*eval_every=*/0);
    absl::StatusOr<float> accuracy = eval.Accuracy(params.data());
    ASSERT_TRUE(accuracy.ok()) << accuracy.status();
    EXPECT_FLOAT_EQ(*accuracy, 0.75f) << "eval_batch " << eval_batch;
  }
}

TEST(EvaluatorTest, DueEveryEvalEveryStepsButNotTheLast) {
  std::unique_ptr<DeviceGroup> devices = LinearDevices();
  ASSERT_NE(devices, nullptr);
  const Dataset test = FourExamples();
  Evaluator every5(&test, devices.get(), 4, /*eval_every=*/5);
  EXPECT_FALSE(every5.Due(4, 20));
  EXPECT_TRUE(every5.Due(5, 20));
  EXPECT_TRUE(every5.Due(15, 20));
  EXPECT_FALSE(every5.Due(20, 20));  // the final evaluation follows
  Evaluator never(&test, devices.get(), 4, /*eval_every=*/0);
  for (uint64_t done : {1, 5, 10}) EXPECT_FALSE(never.Due(done, 20)) << done;
}

}  // namespace
}  // namespace ps
