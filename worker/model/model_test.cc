#include "worker/model/model.h"

#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/model_spec.h"
#include "gtest/gtest.h"
#include "worker/backend/cpu/cpu_backend.h"
#include "worker/backend/deferred_backend.h"
#include "worker/model/testing/model_test_util.h"

namespace ps {
namespace {

ModelSpec Softmax(uint32_t in, uint32_t classes) {
  ModelSpec s;
  s.mutable_softmax()->set_input_dim(in);
  s.mutable_softmax()->set_num_classes(classes);
  return s;
}

ModelSpec Mlp(uint32_t in, std::vector<uint32_t> hidden, uint32_t classes) {
  ModelSpec s;
  s.mutable_mlp()->set_input_dim(in);
  for (uint32_t h : hidden) s.mutable_mlp()->add_hidden(h);
  s.mutable_mlp()->set_num_classes(classes);
  return s;
}

std::unique_ptr<CpuBackend> Cpu(int index = 0) {
  absl::StatusOr<std::unique_ptr<CpuBackend>> b = CpuBackend::Create(index, 1);
  EXPECT_TRUE(b.ok()) << b.status();
  return *std::move(b);
}

std::unique_ptr<Model> MakeModel(const ModelSpec& spec, Backend* backend,
                                 size_t max_batch) {
  absl::StatusOr<std::unique_ptr<Model>> m =
      Model::Create(spec, backend, max_batch);
  EXPECT_TRUE(m.ok()) << m.status();
  return *std::move(m);
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want,
                float tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i])))
        << what << " [" << i << "]";
  }
}

TEST(ModelTest, ShapesAndCounts) {
  auto cpu = Cpu();
  auto m = MakeModel(Mlp(784, {256, 128}, 10), cpu.get(), 64);
  EXPECT_EQ(m->input_dim(), 784u);
  EXPECT_EQ(m->num_classes(), 10u);
  EXPECT_EQ(m->num_parameters(), 235146u);
  EXPECT_EQ(m->tensors().size(), 6u);
  EXPECT_EQ(m->tensors()[2].name(), "fc1/w");
  EXPECT_EQ(m->max_batch(), 64u);
}

TEST(ModelTest, CreateRejectsBadArguments) {
  auto cpu = Cpu();
  ModelSpec bad = Mlp(4, {0}, 3);
  absl::StatusOr<std::unique_ptr<Model>> m = Model::Create(bad, cpu.get(), 8);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("model.mlp.hidden[0]"),
            std::string::npos);
  m = Model::Create(Softmax(4, 3), nullptr, 8);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  m = Model::Create(Softmax(4, 3), cpu.get(), 0);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("max_batch"), std::string::npos);
  m = Model::Create(Softmax(4, 3), cpu.get(), Model::kMaxBatch + 1);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
}

// Central differences of the summed loss against the analytic gradient, for
// every parameter of a small model.
void GradientCheck(const ModelSpec& spec) {
  auto cpu = Cpu();
  auto m = MakeModel(spec, cpu.get(), 8);
  absl::StatusOr<GradientCheckData> g =
      GradientAndFiniteDifferences(*m, /*n=*/8, /*eps=*/1e-3f);
  ASSERT_TRUE(g.ok()) << g.status();
  const std::vector<float>& grad = g->analytic;
  double max_err = 0;
  for (size_t i = 0; i < grad.size(); ++i) {
    const double fd = g->numeric[i];
    // float32 losses: the difference quotient carries ~1e-6 / eps noise.
    EXPECT_NEAR(grad[i], fd, 2e-3 + 1e-2 * std::abs(fd)) << "param " << i;
    max_err = std::max(max_err, std::abs(grad[i] - fd));
  }
  // The gradient is not trivially zero.
  double norm = 0;
  for (float g : grad) norm += std::abs(g);
  EXPECT_GT(norm, 0.1);
  ::testing::Test::RecordProperty("max_abs_error", std::to_string(max_err));
}

TEST(ModelTest, SoftmaxGradientMatchesFiniteDifferences) {
  GradientCheck(Softmax(6, 4));
}

TEST(ModelTest, MlpGradientMatchesFiniteDifferences) {
  GradientCheck(Mlp(6, {7, 5}, 3));
}

TEST(ModelTest, EvaluateMatchesComputeGradientLossAndCounts) {
  auto cpu = Cpu();
  auto m = MakeModel(Mlp(20, {16}, 5), cpu.get(), 32);
  const std::vector<float> params = InitParameters(m->tensors(), 1);
  const LabeledData d = LinearlySeparable(32, 20, 5, 2);
  std::vector<float> grad(m->num_parameters());
  double loss_g, loss_e;
  size_t correct_g, correct_e;
  ASSERT_TRUE(m->ComputeGradient(params.data(), d.x.data(), d.labels.data(),
                                 d.n, grad.data(), &loss_g, &correct_g)
                  .ok());
  ASSERT_TRUE(m->Evaluate(params.data(), d.x.data(), d.labels.data(), d.n,
                          &loss_e, &correct_e)
                  .ok());
  EXPECT_EQ(loss_g, loss_e);
  EXPECT_EQ(correct_g, correct_e);
  EXPECT_GT(loss_g, 0);
}

// Splitting a batch (K devices, or chunks of max_batch) sums to the whole.
TEST(ModelTest, SplitsAndChunksSumToTheFullBatch) {
  const ModelSpec spec = Mlp(30, {24, 12}, 6);
  auto cpu = Cpu();
  auto full = MakeModel(spec, cpu.get(), 64);
  const std::vector<float> params = InitParameters(full->tensors(), 4);
  const LabeledData d = LinearlySeparable(50, 30, 6, 5);
  const size_t np = full->num_parameters();
  std::vector<float> want(np);
  double want_loss;
  size_t want_correct;
  ASSERT_TRUE(full->ComputeGradient(params.data(), d.x.data(), d.labels.data(),
                                    d.n, want.data(), &want_loss, &want_correct)
                  .ok());

  // max_batch 16: four chunks (16, 16, 16, 2) accumulate.
  auto chunked = MakeModel(spec, cpu.get(), 16);
  std::vector<float> got(np);
  double loss;
  size_t correct;
  ASSERT_TRUE(chunked
                  ->ComputeGradient(params.data(), d.x.data(), d.labels.data(),
                                    d.n, got.data(), &loss, &correct)
                  .ok());
  ExpectNear(got, want, 1e-5f, "chunked");
  EXPECT_NEAR(loss, want_loss, 1e-6 * want_loss);
  EXPECT_EQ(correct, want_correct);
  ASSERT_TRUE(chunked
                  ->Evaluate(params.data(), d.x.data(), d.labels.data(), d.n,
                             &loss, &correct)
                  .ok());
  EXPECT_NEAR(loss, want_loss, 1e-6 * want_loss);
  EXPECT_EQ(correct, want_correct);

  // Two replicas on two backends, each on its own thread, 20 + 30 examples.
  auto cpu1 = Cpu(1);
  auto a = MakeModel(spec, cpu.get(), 32);
  auto b = MakeModel(spec, cpu1.get(), 32);
  std::vector<float> ga(np), gb(np);
  double la = 0, lb = 0;
  size_t ca = 0, cb = 0;
  absl::Status sa, sb;
  std::thread ta([&] {
    sa = a->ComputeGradient(params.data(), d.x.data(), d.labels.data(), 20,
                            ga.data(), &la, &ca);
  });
  std::thread tb([&] {
    sb = b->ComputeGradient(params.data(), d.x.data() + 20 * d.dim,
                            d.labels.data() + 20, 30, gb.data(), &lb, &cb);
  });
  ta.join();
  tb.join();
  ASSERT_TRUE(sa.ok()) << sa;
  ASSERT_TRUE(sb.ok()) << sb;
  for (size_t i = 0; i < np; ++i) got[i] = ga[i] + gb[i];
  ExpectNear(got, want, 1e-5f, "two replicas");
  EXPECT_NEAR(la + lb, want_loss, 1e-6 * want_loss);
  EXPECT_EQ(ca + cb, want_correct);
}

// grad_scale rides on d(loss)/d(logits): the gradient is the scaled sum
// (bitwise for a power of two, to rounding otherwise, also across chunks),
// and the loss and counts do not change.
TEST(ModelTest, GradScaleScalesTheGradientOnly) {
  const ModelSpec spec = Mlp(30, {24, 12}, 6);
  auto cpu = Cpu();
  auto m = MakeModel(spec, cpu.get(), 16);  // 50 examples: four chunks
  const std::vector<float> params = InitParameters(m->tensors(), 6);
  const LabeledData d = LinearlySeparable(50, 30, 6, 8);
  const size_t np = m->num_parameters();
  std::vector<float> sum(np);
  double sum_loss;
  size_t sum_correct;
  ASSERT_TRUE(m->ComputeGradient(params.data(), d.x.data(), d.labels.data(),
                                 d.n, sum.data(), &sum_loss, &sum_correct)
                  .ok());
  struct Case {
    float scale;
    bool exact;
  };
  for (const Case c : {Case{0.25f, true}, Case{1.0f / 50, false}}) {
    std::vector<float> got(np);
    double loss;
    size_t correct;
    ASSERT_TRUE(m->ComputeGradient(params.data(), d.x.data(), d.labels.data(),
                                   d.n, got.data(), &loss, &correct, c.scale)
                    .ok());
    EXPECT_EQ(loss, sum_loss) << c.scale;
    EXPECT_EQ(correct, sum_correct) << c.scale;
    std::vector<float> want(np);
    for (size_t i = 0; i < np; ++i) want[i] = sum[i] * c.scale;
    if (c.exact) {
      EXPECT_EQ(got, want);
    } else {
      ExpectNear(got, want, 1e-5f, "scale 1/50");
    }
  }
}

TEST(ModelTest, EmptyBatchGivesZeroGradient) {
  auto cpu = Cpu();
  auto m = MakeModel(Softmax(4, 3), cpu.get(), 8);
  const std::vector<float> params = InitParameters(m->tensors(), 1);
  std::vector<float> grad(m->num_parameters(), 7.0f);
  double loss = -1;
  size_t correct = 99;
  ASSERT_TRUE(m->ComputeGradient(params.data(), nullptr, nullptr, 0,
                                 grad.data(), &loss, &correct)
                  .ok());
  EXPECT_EQ(grad, std::vector<float>(m->num_parameters(), 0.0f));
  EXPECT_EQ(loss, 0.0);
  EXPECT_EQ(correct, 0u);
}

TEST(ModelTest, BadInputsAreRejectedWithTheFieldNamed) {
  auto cpu = Cpu();
  auto m = MakeModel(Softmax(4, 3), cpu.get(), 8);
  const std::vector<float> params = InitParameters(m->tensors(), 1);
  std::vector<float> grad(m->num_parameters());
  const std::vector<float> x(4 * 3, 0.5f);
  const std::vector<int32_t> labels = {0, 3, 1};
  absl::Status s = m->ComputeGradient(params.data(), x.data(), labels.data(), 3,
                                      grad.data(), nullptr, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("labels[1] = 3"), std::string::npos) << s;
  const std::vector<int32_t> negative = {0, 1, -1};
  s = m->Evaluate(params.data(), x.data(), negative.data(), 3, nullptr,
                  nullptr);
  EXPECT_NE(s.message().find("labels[2] = -1"), std::string::npos) << s;
  s = m->ComputeGradient(params.data(), nullptr, labels.data(), 3, grad.data(),
                         nullptr, nullptr);
  EXPECT_NE(s.message().find("x is null"), std::string::npos) << s;
  s = m->ComputeGradient(params.data(), x.data(), nullptr, 3, grad.data(),
                         nullptr, nullptr);
  EXPECT_NE(s.message().find("labels is null"), std::string::npos) << s;
  s = m->ComputeGradient(params.data(), x.data(), labels.data(), 3, nullptr,
                         nullptr, nullptr);
  EXPECT_NE(s.message().find("grad is null"), std::string::npos) << s;
  s = m->Evaluate(nullptr, x.data(), negative.data(), 2, nullptr, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
}

TEST(ModelTest, ResidentParametersAndDeviceGradient) {
  auto cpu = Cpu();
  auto m = MakeModel(Mlp(10, {8}, 4), cpu.get(), 16);
  std::vector<float> params = InitParameters(m->tensors(), 2);
  const LabeledData d = LinearlySeparable(16, 10, 4, 3);
  std::vector<float> want(m->num_parameters());
  double want_loss;
  ASSERT_TRUE(m->ComputeGradient(params.data(), d.x.data(), d.labels.data(),
                                 d.n, want.data(), &want_loss, nullptr)
                  .ok());
  ASSERT_TRUE(m->SetParameters(params.data()).ok());
  // The model copied them: changing the caller's copy changes nothing.
  for (float& p : params) p = 0;
  std::vector<float> got(m->num_parameters());
  double loss;
  ASSERT_TRUE(m->ComputeGradient(nullptr, d.x.data(), d.labels.data(), d.n,
                                 got.data(), &loss, nullptr)
                  .ok());
  EXPECT_EQ(got, want);
  EXPECT_EQ(loss, want_loss);
  // Explicit params in a call leave the resident ones alone.
  ASSERT_TRUE(m->Evaluate(params.data(), d.x.data(), d.labels.data(), d.n,
                          &loss, nullptr)
                  .ok());
  EXPECT_NE(loss, want_loss);
  ASSERT_TRUE(m->ComputeDeviceGradient(nullptr, d.x.data(), d.labels.data(),
                                       d.n, &loss, nullptr)
                  .ok());
  EXPECT_EQ(loss, want_loss);
  std::fill(got.begin(), got.end(), 0.0f);
  ASSERT_TRUE(m->CopyGradientToHost(got.data()).ok());
  EXPECT_EQ(got, want);
}

// Plain SGD on a separable set: the mean loss falls well below its start and
// the training accuracy ends high.
void TrainsWithSgd(const ModelSpec& spec, float lr) {
  auto cpu = Cpu();
  const size_t batch = 32;
  auto m = MakeModel(spec, cpu.get(), batch);
  std::vector<float> params = InitParameters(m->tensors(), 7);
  const LabeledData d =
      LinearlySeparable(512, m->input_dim(), m->num_classes(), 8);
  std::vector<float> grad(m->num_parameters());
  double start_loss;
  ASSERT_TRUE(m->Evaluate(params.data(), d.x.data(), d.labels.data(), d.n,
                          &start_loss, nullptr)
                  .ok());
  for (int epoch = 0; epoch < 10; ++epoch) {
    for (size_t b = 0; b + batch <= d.n; b += batch) {
      ASSERT_TRUE(m->ComputeGradient(params.data(), &d.x[b * d.dim],
                                     &d.labels[b], batch, grad.data(), nullptr,
                                     nullptr)
                      .ok());
      for (size_t i = 0; i < params.size(); ++i) {
        params[i] -= lr / batch * grad[i];
      }
    }
  }
  double end_loss;
  size_t correct;
  ASSERT_TRUE(m->Evaluate(params.data(), d.x.data(), d.labels.data(), d.n,
                          &end_loss, &correct)
                  .ok());
  EXPECT_LT(end_loss, 0.25 * start_loss)
      << "start " << start_loss / d.n << " end " << end_loss / d.n;
  EXPECT_GT(correct, 0.9 * d.n);
}

TEST(ModelTest, SoftmaxTrainsWithSgd) { TrainsWithSgd(Softmax(20, 4), 0.5f); }

TEST(ModelTest, MlpTrainsWithSgd) { TrainsWithSgd(Mlp(20, {32, 16}, 4), 0.2f); }

// The gradient, loss and correct count of `got_model` on `params` and `d`,
// computed into `got` (num_parameters() floats), equal `want_model`'s.
void ExpectSameGradient(Model& want_model, Model& got_model,
                        const float* params, const LabeledData& d, float* got) {
  std::vector<float> want(want_model.num_parameters());
  double want_loss, loss;
  size_t want_correct, correct;
  ASSERT_TRUE(want_model
                  .ComputeGradient(params, d.x.data(), d.labels.data(), d.n,
                                   want.data(), &want_loss, &want_correct)
                  .ok());
  ASSERT_TRUE(got_model
                  .ComputeGradient(params, d.x.data(), d.labels.data(), d.n,
                                   got, &loss, &correct)
                  .ok());
  EXPECT_EQ(std::vector<float>(got, got + want.size()), want);
  EXPECT_EQ(loss, want_loss);
  EXPECT_EQ(correct, want_correct);
}

// The device path (staging, early uploads, per-layer downloads, chunks,
// resident parameters) on a backend that defers all work to Synchronize()
// and rejects host pointers in compute calls: it must give the CPU path's
// results exactly, as both run the same arithmetic.
TEST(ModelTest, DevicePathMatchesHostPathExactly) {
  const ModelSpec spec = Mlp(30, {24, 12}, 6);
  auto cpu = Cpu();
  DeferredBackend dev;
  auto host_model = MakeModel(spec, cpu.get(), 16);
  auto dev_model = MakeModel(spec, &dev, 16);
  const std::vector<float> params = InitParameters(host_model->tensors(), 4);
  const std::vector<float> other = InitParameters(host_model->tensors(), 5);
  const size_t np = host_model->num_parameters();
  for (size_t n : {size_t{0}, size_t{7}, size_t{16}, size_t{50}}) {
    SCOPED_TRACE(n);
    const LabeledData d = LinearlySeparable(n, 30, 6, 5);
    std::vector<float> want(np), got(np, 9.0f);
    double want_loss, loss;
    size_t want_correct, correct;
    ASSERT_TRUE(host_model
                    ->ComputeGradient(params.data(), d.x.data(),
                                      d.labels.data(), n, want.data(),
                                      &want_loss, &want_correct)
                    .ok());
    ASSERT_TRUE(dev_model
                    ->ComputeGradient(params.data(), d.x.data(),
                                      d.labels.data(), n, got.data(), &loss,
                                      &correct)
                    .ok());
    EXPECT_EQ(got, want);
    EXPECT_EQ(loss, want_loss);
    EXPECT_EQ(correct, want_correct);

    ASSERT_TRUE(dev_model->SetParameters(params.data()).ok());
    // A call with other explicit params in between must not disturb them.
    ASSERT_TRUE(dev_model
                    ->Evaluate(other.data(), d.x.data(), d.labels.data(), n,
                               &loss, &correct)
                    .ok());
    ASSERT_TRUE(dev_model
                    ->ComputeDeviceGradient(nullptr, d.x.data(),
                                            d.labels.data(), n, &loss, &correct)
                    .ok());
    std::fill(got.begin(), got.end(), 9.0f);
    ASSERT_TRUE(dev_model->CopyGradientToHost(got.data()).ok());
    EXPECT_EQ(got, want);
    EXPECT_EQ(loss, want_loss);
    ASSERT_TRUE(
        dev_model
            ->Evaluate(nullptr, d.x.data(), d.labels.data(), n, &loss, &correct)
            .ok());
    EXPECT_EQ(loss, want_loss);
    EXPECT_EQ(correct, want_correct);
  }
  EXPECT_GT(dev.calls_run(), 0);
}

// Parameters and gradient in pinned caller memory (Backend::PinHost) are
// copied from and into directly, not through the staging buffers, with the
// same results; unpinned, the staging path is back.
TEST(ModelTest, PinnedCallerBuffersSkipTheStagingCopy) {
  const ModelSpec spec = Mlp(30, {24, 12}, 6);
  auto cpu = Cpu();
  DeferredBackend dev;
  auto host_model = MakeModel(spec, cpu.get(), 16);
  auto dev_model = MakeModel(spec, &dev, 16);
  std::vector<float> params = InitParameters(host_model->tensors(), 4);
  const size_t np = host_model->num_parameters();
  std::vector<float> got(np, 9.0f);
  const size_t bytes = np * sizeof(float);
  ASSERT_TRUE(dev.PinHost(params.data(), bytes).ok());
  ASSERT_TRUE(dev.PinHost(got.data(), bytes).ok());
  EXPECT_TRUE(dev.IsPinned(params.data() + 1, bytes - sizeof(float)));
  EXPECT_FALSE(dev.IsPinned(params.data() + 1, bytes));  // runs past the end
  EXPECT_EQ(dev.PinHost(params.data() + 2, 4).code(),
            absl::StatusCode::kInvalidArgument);         // overlaps
  EXPECT_TRUE(cpu->PinHost(params.data(), bytes).ok());  // host memory: no-op
  EXPECT_FALSE(cpu->IsPinned(params.data(), bytes));
  for (size_t n : {size_t{7}, size_t{50}}) {
    SCOPED_TRACE(n);
    const int64_t before = dev.pinned_copy_bytes();
    std::fill(got.begin(), got.end(), 9.0f);
    ExpectSameGradient(*host_model, *dev_model, params.data(),
                       LinearlySeparable(n, 30, 6, 5), got.data());
    // Every parameter went up from `params`, every gradient came down to
    // `got`, once each.
    EXPECT_EQ(dev.pinned_copy_bytes() - before,
              static_cast<int64_t>(2 * bytes));
  }
  dev.UnpinHost(params.data());
  dev.UnpinHost(got.data());
  EXPECT_FALSE(dev.IsPinned(params.data(), bytes));
  const int64_t before = dev.pinned_copy_bytes();
  const LabeledData d = LinearlySeparable(7, 30, 6, 5);
  ASSERT_TRUE(dev_model
                  ->ComputeGradient(params.data(), d.x.data(), d.labels.data(),
                                    7, got.data(), nullptr, nullptr)
                  .ok());
  EXPECT_EQ(dev.pinned_copy_bytes(), before);
}

}  // namespace
}  // namespace ps
