// The model on "gpu:0" against the same model on "cpu:0": gradients, losses
// and counts on random inputs, chunked and resident-parameter paths, and the
// device-gradient path. Skips without a visible GPU (or without CUDA in the
// build); always builds, through the backend factory.

#include <cmath>
#include <string>
#include <vector>

#include "core/model_spec.h"
#include "gtest/gtest.h"
#include "worker/backend/backend_factory.h"
#include "worker/model/model.h"
#include "worker/model/testing/model_test_util.h"

namespace ps {
namespace {

class ModelGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (GpuCount() == 0) {
      GTEST_SKIP() << (CudaBuilt() ? "no CUDA device visible"
                                   : "built without CUDA");
    }
    absl::StatusOr<std::unique_ptr<Backend>> cpu = CreateBackend("cpu:0", 1);
    absl::StatusOr<std::unique_ptr<Backend>> gpu = CreateBackend("gpu:0", 0);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    cpu_ = *std::move(cpu);
    gpu_ = *std::move(gpu);
  }

  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<Backend> gpu_;
};

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  double max_abs = 0;
  for (float w : want) max_abs = std::max<double>(max_abs, std::abs(w));
  for (size_t i = 0; i < got.size(); ++i) {
    // Different summation orders in the GEMMs: compare against the
    // gradient's scale, not element by element in relative terms.
    ASSERT_NEAR(got[i], want[i], 1e-4 * max_abs + 1e-6)
        << what << " [" << i << "]";
  }
}

TEST_F(ModelGpuTest, GradientsMatchCpu) {
  const ModelSpec spec = FashionMlpSpec();
  // max_batch 48 on the GPU: a batch of 100 runs as 48 + 48 + 4.
  absl::StatusOr<std::unique_ptr<Model>> c =
      Model::Create(spec, cpu_.get(), 128);
  absl::StatusOr<std::unique_ptr<Model>> g =
      Model::Create(spec, gpu_.get(), 48);
  ASSERT_TRUE(c.ok() && g.ok());
  const std::vector<float> params = InitParameters((*c)->tensors(), 21);
  const LabeledData d = LinearlySeparable(100, 784, 10, 22);
  const size_t np = (*c)->num_parameters();
  std::vector<float> want(np), got(np);
  double want_loss, loss;
  size_t want_correct, correct;
  ASSERT_TRUE((*c)->ComputeGradient(params.data(), d.x.data(), d.labels.data(),
                                    d.n, want.data(), &want_loss, &want_correct)
                  .ok());
  ASSERT_TRUE((*g)->ComputeGradient(params.data(), d.x.data(), d.labels.data(),
                                    d.n, got.data(), &loss, &correct)
                  .ok());
  ExpectClose(got, want, "per-call params");
  EXPECT_NEAR(loss, want_loss, 1e-4 * want_loss);
  EXPECT_EQ(correct, want_correct);

  ASSERT_TRUE((*g)->SetParameters(params.data()).ok());
  ASSERT_TRUE((*g)->ComputeDeviceGradient(nullptr, d.x.data(), d.labels.data(),
                                          d.n, &loss, &correct)
                  .ok());
  std::fill(got.begin(), got.end(), 0.0f);
  ASSERT_TRUE((*g)->CopyGradientToHost(got.data()).ok());
  ExpectClose(got, want, "device gradient");

  ASSERT_TRUE(
      (*g)->Evaluate(nullptr, d.x.data(), d.labels.data(), d.n, &loss, &correct)
          .ok());
  EXPECT_NEAR(loss, want_loss, 1e-4 * want_loss);
  EXPECT_EQ(correct, want_correct);
}

}  // namespace
}  // namespace ps
