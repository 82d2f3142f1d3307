#include "worker/model/testing/model_test_util.h"

#include <cmath>
#include <random>

#include "common/status_macros.h"

namespace ps {

absl::StatusOr<StepBench> MakeStepBench(const ModelSpec& spec, Backend* backend,
                                        size_t batch) {
  StepBench b;
  PS_ASSIGN_OR_RETURN(b.model, Model::Create(spec, backend, batch));
  b.batch = batch;
  b.params = InitParameters(b.model->tensors(), 1);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  b.x.resize(batch * b.model->input_dim());
  for (float& v : b.x) v = pixel(rng);
  b.labels.resize(batch);
  for (size_t i = 0; i < batch; ++i) b.labels[i] = static_cast<int>(i % 10);
  b.grad.resize(b.model->num_parameters());
  return b;
}

ModelSpec FashionMlpSpec() {
  ModelSpec s;
  s.mutable_mlp()->set_input_dim(784);
  s.mutable_mlp()->add_hidden(256);
  s.mutable_mlp()->add_hidden(128);
  s.mutable_mlp()->set_num_classes(10);
  return s;
}

ModelSpec FashionCnnSpec() {
  ModelSpec s;
  Cnn* m = s.mutable_cnn();
  m->set_height(28);
  m->set_width(28);
  m->set_channels(1);
  for (uint32_t filters : {32, 64}) {
    ConvLayer* l = m->add_conv();
    l->set_filters(filters);
    l->set_kernel(5);
    l->set_pool(2);
  }
  m->add_hidden(1024);
  m->set_num_classes(10);
  return s;
}

std::vector<float> InitParameters(const std::vector<TensorSpec>& tensors,
                                  uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> params;
  for (const TensorSpec& t : tensors) {
    size_t size = 1;
    for (uint64_t d : t.shape()) size *= d;
    const double fan_in = t.shape_size() > 0 ? t.shape(0) : 1;
    const double fan_out = t.shape_size() > 1 ? t.shape(1) : 1;
    const InitSpec& init = t.init();
    for (size_t i = 0; i < size; ++i) {
      double v = 0.0;
      switch (init.kind()) {
        case CONSTANT:
          v = init.value();
          break;
        case UNIFORM:
          v = std::uniform_real_distribution<double>(-init.scale(),
                                                     init.scale())(rng);
          break;
        case NORMAL:
          v = std::normal_distribution<double>(0.0, init.scale())(rng);
          break;
        case GLOROT_UNIFORM: {
          const double a = std::sqrt(6.0 / (fan_in + fan_out));
          v = std::uniform_real_distribution<double>(-a, a)(rng);
          break;
        }
        case HE_NORMAL:
          v = std::normal_distribution<double>(0.0,
                                               std::sqrt(2.0 / fan_in))(rng);
          break;
        default:  // ZEROS, unspecified
          break;
      }
      params.push_back(static_cast<float>(v));
    }
  }
  return params;
}

LabeledData LinearlySeparable(size_t n, size_t dim, size_t classes,
                              uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> teacher(dim * classes);
  for (float& t : teacher) t = normal(rng);
  LabeledData d;
  d.n = n;
  d.dim = dim;
  d.x.resize(n * dim);
  d.labels.resize(n);
  for (size_t i = 0; i < n; ++i) {
    float* row = &d.x[i * dim];
    for (size_t j = 0; j < dim; ++j) row[j] = normal(rng);
    int32_t best = 0;
    double best_score = -INFINITY;
    for (size_t c = 0; c < classes; ++c) {
      double score = 0;
      for (size_t j = 0; j < dim; ++j)
        score += row[j] * teacher[j * classes + c];
      if (score > best_score) {
        best_score = score;
        best = static_cast<int32_t>(c);
      }
    }
    d.labels[i] = best;
  }
  return d;
}

absl::StatusOr<GradientCheckData> GradientAndFiniteDifferences(Model& m,
                                                               size_t n,
                                                               float eps) {
  GradientCheckData g;
  g.params = InitParameters(m.tensors(), 3);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-0.3f, 0.3f);
  for (float& p : g.params) p += u(rng);
  const LabeledData d = LinearlySeparable(n, m.input_dim(), m.num_classes(), 9);
  g.analytic.resize(m.num_parameters());
  double loss = 0;
  PS_RETURN_IF_ERROR(m.ComputeGradient(g.params.data(), d.x.data(),
                                       d.labels.data(), n, g.analytic.data(),
                                       &loss, nullptr));
  std::vector<float> params = g.params;
  g.numeric.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const float saved = params[i];
    double plus = 0, minus = 0;
    params[i] = saved + eps;
    PS_RETURN_IF_ERROR(m.Evaluate(params.data(), d.x.data(), d.labels.data(), n,
                                  &plus, nullptr));
    params[i] = saved - eps;
    PS_RETURN_IF_ERROR(m.Evaluate(params.data(), d.x.data(), d.labels.data(), n,
                                  &minus, nullptr));
    params[i] = saved;
    g.numeric[i] = (plus - minus) / (2.0 * eps);
  }
  return g;
}

}  // namespace ps
