// Test and benchmark helpers for models: parameter initialisation from
// TensorSpecs (the shards' job in production) and a seeded, linearly
// separable data set.
//
//   std::vector<float> params = InitParameters(ModelTensors(spec), 42);
//   LabeledData d = LinearlySeparable(/*n=*/512, /*dim=*/20, /*classes=*/4, 7);
//   absl::StatusOr<GradientCheckData> g = GradientAndFiniteDifferences(
//       *model, /*n=*/8, /*eps=*/1e-3f);   // compare g->analytic, g->numeric

#ifndef WORKER_MODEL_TESTING_MODEL_TEST_UTIL_H_
#define WORKER_MODEL_TESTING_MODEL_TEST_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "worker/model/model.h"

namespace ps {

// The built-in CNN (configs/jobs/fashion_cnn.pbtxt): conv5x5-32, pool 2,
// conv5x5-64, pool 2, fc 1024, fc 10 on 28x28x1.
ModelSpec FashionCnnSpec();
// The demo's MLP (configs/jobs/fashion_mlp.pbtxt): 784-256-128-10.
ModelSpec FashionMlpSpec();

// Flat-layout parameters drawn per each tensor's InitSpec with a fixed seed.
std::vector<float> InitParameters(const std::vector<TensorSpec>& tensors,
                                  uint64_t seed);

struct LabeledData {
  size_t n = 0;
  size_t dim = 0;
  std::vector<float> x;         // n x dim, row-major
  std::vector<int32_t> labels;  // n
};

// x ~ N(0, 1); label = arg-max of x * T for a random teacher T [dim x
// classes], so a linear classifier can fit it exactly.
LabeledData LinearlySeparable(size_t n, size_t dim, size_t classes,
                              uint64_t seed);

// One training step to time: the model on a backend at `batch` rows, its
// InitParameters (seed 1), a batch of pixels U(0, 1) (seed 5) with labels
// i % 10, and the gradient buffer.
struct StepBench {
  std::unique_ptr<Model> model;
  size_t batch = 0;
  std::vector<float> params, x, grad;
  std::vector<int32_t> labels;

  // One forward + backward (loss may be null).
  absl::Status Step(double* loss) {
    return model->ComputeGradient(params.data(), x.data(), labels.data(), batch,
                                  grad.data(), loss, nullptr);
  }
};
absl::StatusOr<StepBench> MakeStepBench(const ModelSpec& spec, Backend* backend,
                                        size_t batch);

// A model's gradient and its central differences, for a gradient check.
struct GradientCheckData {
  std::vector<float> params;    // where both were taken
  std::vector<float> analytic;  // ComputeGradient: d(summed loss)/d(params)
  std::vector<double> numeric;  // (loss(p + eps) - loss(p - eps)) / 2 eps
};

// Both at InitParameters(m.tensors(), 3) plus U(-0.3, 0.3) noise (seed 5;
// non-zero biases, so gradients flow through the ReLUs too), on
// LinearlySeparable(n, input_dim, num_classes, 9), for every parameter.
absl::StatusOr<GradientCheckData> GradientAndFiniteDifferences(Model& m,
                                                               size_t n,
                                                               float eps);

}  // namespace ps

#endif  // WORKER_MODEL_TESTING_MODEL_TEST_UTIL_H_
