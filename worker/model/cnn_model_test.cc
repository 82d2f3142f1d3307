// The CNN (ModelSpec.cnn) through Model: numerical gradient checks, hooks
// and layer ranges, the device path and chunking, and a short training run;
// on the CPU backend's OpenBLAS (im2col) kernels and on its oneDNN ones,
// which also must match each other within a stated tolerance and repeat
// their bits across fresh backends.

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/model_spec.h"
#include "gtest/gtest.h"
#include "worker/backend/cpu/cpu_backend.h"
#include "worker/backend/deferred_backend.h"
#include "worker/model/model.h"
#include "worker/model/testing/model_test_util.h"

namespace ps {
namespace {

struct ConvDef {
  uint32_t filters, kernel, pool;
};

ModelSpec CnnSpec(uint32_t h, uint32_t w, uint32_t c,
                  std::vector<ConvDef> convs, std::vector<uint32_t> hidden,
                  uint32_t classes) {
  ModelSpec s;
  Cnn* m = s.mutable_cnn();
  m->set_height(h);
  m->set_width(w);
  m->set_channels(c);
  for (const ConvDef& d : convs) {
    ConvLayer* l = m->add_conv();
    l->set_filters(d.filters);
    l->set_kernel(d.kernel);
    l->set_pool(d.pool);
  }
  for (uint32_t x : hidden) m->add_hidden(x);
  m->set_num_classes(classes);
  return s;
}

constexpr CpuKernels kBoth[] = {CpuKernels::kOpenBlas, CpuKernels::kOneDnn};

std::unique_ptr<CpuBackend> Cpu(CpuKernels kernels = CpuKernels::kOpenBlas) {
  absl::StatusOr<std::unique_ptr<CpuBackend>> b =
      CpuBackend::Create(0, 1, kernels);
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

TEST(CnnModelTest, ShapesLayersAndRanges) {
  auto cpu = Cpu();
  const ModelSpec spec =
      CnnSpec(28, 28, 1, {{32, 5, 2}, {64, 5, 2}}, {1024}, 10);
  auto m = MakeModel(spec, cpu.get(), 4);
  EXPECT_EQ(m->input_dim(), 784u);
  EXPECT_EQ(m->num_classes(), 10u);
  EXPECT_EQ(m->num_parameters(), NumParameters(ModelTensors(spec)));
  EXPECT_EQ(m->num_parameters(), 25u * 32 + 32 + 800 * 64 + 64 + 3136 * 1024 +
                                     1024 + 1024 * 10 + 10);
  ASSERT_EQ(m->num_layers(), 4u);
  // The layer ranges tile the flat layout in tensor order.
  size_t next = 0;
  for (size_t l = 0; l < m->num_layers(); ++l) {
    const auto [offset, length] = m->LayerRange(l);
    EXPECT_EQ(offset, next) << l;
    next += length;
  }
  EXPECT_EQ(next, m->num_parameters());
  EXPECT_EQ(m->LayerRange(1).second, 800u * 64 + 64);
}

// Central differences of the summed loss against the analytic gradient, for
// every parameter (max pooling is piecewise linear: with random data no
// window's maximum changes within eps).
void GradientCheck(const ModelSpec& spec, size_t n, size_t max_batch,
                   CpuKernels kernels) {
  SCOPED_TRACE(CpuKernelsName(kernels));
  auto cpu = Cpu(kernels);
  auto m = MakeModel(spec, cpu.get(), max_batch);
  if (kernels == CpuKernels::kOneDnn) {
    // Every conv layer runs on oneDNN, not just some.
    size_t onednn = 0;
    for (const std::string& c : m->kernel_choices()) {
      onednn += c.find(": onednn") != std::string::npos &&
                c.find(" conv ") != std::string::npos;
    }
    EXPECT_EQ(onednn, m->num_layers() - ModelLayerWidths(spec).size() + 1);
  }
  absl::StatusOr<GradientCheckData> g =
      GradientAndFiniteDifferences(*m, n, /*eps=*/1e-3f);
  ASSERT_TRUE(g.ok()) << g.status();
  const std::vector<float>& grad = g->analytic;
  size_t checked_nonzero = 0;
  for (size_t i = 0; i < grad.size(); ++i) {
    const double fd = g->numeric[i];
    EXPECT_NEAR(grad[i], fd, 3e-3 + 1e-2 * std::abs(fd)) << "param " << i;
    if (std::abs(fd) > 1e-2) ++checked_nonzero;
  }
  // Every layer's gradient takes part, not just the last.
  for (size_t l = 0; l < m->num_layers(); ++l) {
    const auto [offset, length] = m->LayerRange(l);
    double norm = 0;
    for (size_t i = offset; i < offset + length; ++i) norm += std::abs(grad[i]);
    EXPECT_GT(norm, 1e-3) << "layer " << l;
  }
  EXPECT_GT(checked_nonzero, grad.size() / 4);
}

TEST(CnnModelTest, GradientMatchesFiniteDifferences) {
  // Two conv layers (k = 3 with 2 x 2 pooling, then k = 5 without), a hidden
  // layer, channels > 1 and odd sizes whose last row and column the pooling
  // drops.
  for (CpuKernels k : kBoth) {
    GradientCheck(CnnSpec(7, 6, 2, {{3, 3, 2}, {4, 5, 1}}, {5}, 3), 4, 4, k);
  }
}

TEST(CnnModelTest, GradientMatchesFiniteDifferencesAcrossChunks) {
  // One conv with 3 x 3 pooling straight into the softmax layer, over a batch
  // larger than max_batch (two chunks, the second accumulating).
  for (CpuKernels k : kBoth) {
    GradientCheck(CnnSpec(6, 6, 1, {{2, 1, 3}}, {}, 4), 5, 3, k);
  }
}

TEST(CnnModelTest, HooksSeeEveryLayerInOrder) {
  auto cpu = Cpu();
  auto m =
      MakeModel(CnnSpec(8, 8, 1, {{4, 3, 2}, {4, 3, 2}}, {6}, 3), cpu.get(), 8);
  const std::vector<float> params = InitParameters(m->tensors(), 1);
  const LabeledData d = LinearlySeparable(8, 64, 3, 2);
  std::vector<size_t> before, after;
  LayerHooks hooks;
  hooks.before_forward = [&](size_t l) {
    before.push_back(l);
    return absl::OkStatus();
  };
  hooks.after_backward = [&](size_t l) { after.push_back(l); };
  std::vector<float> grad(m->num_parameters());
  ASSERT_TRUE(m->ComputeGradient(params.data(), d.x.data(), d.labels.data(),
                                 d.n, grad.data(), nullptr, nullptr, 1.0f,
                                 &hooks)
                  .ok());
  EXPECT_EQ(before, (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_EQ(after, (std::vector<size_t>{3, 2, 1, 0}));
}

// The device path (staging, early uploads, per-layer downloads, chunks,
// resident parameters) on the deferred backend gives the CPU path's bits.
TEST(CnnModelTest, DevicePathMatchesHostPathExactly) {
  const ModelSpec spec = CnnSpec(9, 8, 2, {{4, 3, 2}, {6, 3, 2}}, {10}, 5);
  auto cpu = Cpu();
  DeferredBackend dev;
  auto host_model = MakeModel(spec, cpu.get(), 16);
  auto dev_model = MakeModel(spec, &dev, 16);
  const std::vector<float> params = InitParameters(host_model->tensors(), 4);
  const size_t np = host_model->num_parameters();
  for (size_t n : {size_t{0}, size_t{7}, size_t{40}}) {
    SCOPED_TRACE(n);
    const LabeledData d = LinearlySeparable(n, 144, 5, 5);
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
    ASSERT_TRUE(dev_model
                    ->ComputeDeviceGradient(nullptr, d.x.data(),
                                            d.labels.data(), n, &loss, &correct)
                    .ok());
    std::fill(got.begin(), got.end(), 9.0f);
    ASSERT_TRUE(dev_model->CopyGradientToHost(got.data()).ok());
    EXPECT_EQ(got, want);
  }
  EXPECT_GT(dev.calls_run(), 0);
}

// BSP's bitwise reproducibility needs every step's gradient to repeat its
// bits: across calls, and across fresh backends and models (a new process,
// new oneDNN primitives).
TEST(CnnModelTest, RepeatedCallsAndFreshBackendsAreBitwiseEqual) {
  const ModelSpec spec = CnnSpec(12, 12, 1, {{8, 5, 2}, {8, 3, 2}}, {16}, 4);
  const LabeledData d = LinearlySeparable(32, 144, 4, 3);
  for (CpuKernels k : kBoth) {
    SCOPED_TRACE(CpuKernelsName(k));
    std::vector<std::vector<float>> runs;
    for (int fresh = 0; fresh < 2; ++fresh) {
      auto cpu = Cpu(k);
      auto m = MakeModel(spec, cpu.get(), 32);
      const std::vector<float> params = InitParameters(m->tensors(), 6);
      for (int call = 0; call < 2; ++call) {
        runs.emplace_back(m->num_parameters());
        ASSERT_TRUE(m->ComputeGradient(params.data(), d.x.data(),
                                       d.labels.data(), d.n, runs.back().data(),
                                       nullptr, nullptr)
                        .ok());
      }
    }
    for (size_t r = 1; r < runs.size(); ++r) EXPECT_EQ(runs[r], runs[0]) << r;
  }
}

// oneDNN's convolutions and sgemm against the im2col + OpenBLAS reference at
// the built-in CNN's layer shapes (smaller batch): every gradient element
// within 1e-4 of the reference's largest magnitude in its layer plus 1e-3
// relative (different summation orders, nothing else), and the same loss
// and arg-max counts to 1e-5 relative.
TEST(CnnModelTest, OneDnnMatchesOpenBlasWithinTolerance) {
  const ModelSpec spec = CnnSpec(28, 28, 1, {{32, 5, 2}, {64, 5, 2}}, {64}, 10);
  const LabeledData d = LinearlySeparable(6, 784, 10, 9);
  std::vector<std::vector<float>> grads;
  std::vector<double> losses;
  for (CpuKernels k : kBoth) {
    auto cpu = Cpu(k);
    auto m = MakeModel(spec, cpu.get(), 6);
    const std::vector<float> params = InitParameters(m->tensors(), 8);
    grads.emplace_back(m->num_parameters());
    losses.emplace_back();
    ASSERT_TRUE(m->ComputeGradient(params.data(), d.x.data(), d.labels.data(),
                                   d.n, grads.back().data(), &losses.back(),
                                   nullptr)
                    .ok());
    if (k == CpuKernels::kOneDnn) {
      for (size_t l = 0; l < m->num_layers(); ++l) {
        const auto [offset, length] = m->LayerRange(l);
        float scale = 0;
        for (size_t i = offset; i < offset + length; ++i) {
          scale = std::max(scale, std::abs(grads[0][i]));
        }
        for (size_t i = offset; i < offset + length; ++i) {
          ASSERT_NEAR(grads[1][i], grads[0][i],
                      1e-4 * scale + 1e-3 * std::abs(grads[0][i]))
              << "layer " << l << " param " << i;
        }
      }
    }
  }
  EXPECT_NEAR(losses[1], losses[0], 1e-5 * std::abs(losses[0]));
  EXPECT_NE(grads[0], grads[1]);  // really two kernels
}

// Plain SGD on a separable set of 8 x 8 "images" (no pooling, which would
// lose what a linear teacher looks at): the loss falls well below
// its start and the training accuracy ends high.
void TrainsWithSgd(CpuKernels kernels) {
  SCOPED_TRACE(CpuKernelsName(kernels));
  auto cpu = Cpu(kernels);
  const size_t batch = 32;
  auto m = MakeModel(CnnSpec(8, 8, 1, {{8, 3, 1}}, {32}, 4), cpu.get(), batch);
  std::vector<float> params = InitParameters(m->tensors(), 7);
  const LabeledData d = LinearlySeparable(512, 64, 4, 8);
  std::vector<float> grad(m->num_parameters());
  double start_loss;
  ASSERT_TRUE(m->Evaluate(params.data(), d.x.data(), d.labels.data(), d.n,
                          &start_loss, nullptr)
                  .ok());
  const float lr = 0.05f;
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
  EXPECT_LT(end_loss, 0.3 * start_loss)
      << "start " << start_loss / d.n << " end " << end_loss / d.n;
  EXPECT_GT(correct, 0.85 * d.n);
}

TEST(CnnModelTest, TrainsWithSgd) {
  for (CpuKernels k : kBoth) TrainsWithSgd(k);
}

}  // namespace
}  // namespace ps
