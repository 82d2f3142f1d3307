#include "worker/model/ctr_model.h"

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/model_spec.h"
#include "gtest/gtest.h"
#include "worker/backend/cpu/cpu_backend.h"
#include "worker/backend/deferred_backend.h"
#include "worker/model/testing/model_test_util.h"

namespace ps {
namespace {

ModelSpec Ctr(uint32_t fields, uint32_t dim, uint32_t dense,
              std::vector<uint32_t> hidden) {
  ModelSpec s;
  CtrModel* m = s.mutable_ctr();
  m->set_table("emb");
  m->set_fields(fields);
  m->set_dense_features(dense);
  m->set_embedding_dim(dim);
  for (uint32_t h : hidden) m->add_hidden(h);
  return s;
}

// The gradient-check model: 3 fields x dim 2 + 2 dense -> 4 -> 1.
ModelSpec Tiny() { return Ctr(3, 2, 2, {4}); }

std::unique_ptr<CpuBackend> Cpu(int index = 0) {
  absl::StatusOr<std::unique_ptr<CpuBackend>> b = CpuBackend::Create(index, 1);
  EXPECT_TRUE(b.ok()) << b.status();
  return *std::move(b);
}

std::unique_ptr<CtrReplica> MakeModel(const ModelSpec& spec, Backend* backend,
                                      size_t max_batch) {
  absl::StatusOr<std::unique_ptr<CtrReplica>> m =
      CtrReplica::Create(spec, backend, max_batch);
  EXPECT_TRUE(m.ok()) << m.status();
  return *std::move(m);
}

// n examples: labels 0/1, dense ~ N(0, 1), field f's ids among
// `values` values (few values: many duplicates).
CtrBatch RandomBatch(size_t n, int fields, int dense, uint64_t values,
                     uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  CtrBatch b;
  b.size = n;
  for (size_t i = 0; i < n; ++i) {
    b.labels.push_back(static_cast<float>(rng() % 2));
    for (int j = 0; j < dense; ++j) b.dense.push_back(normal(rng));
    for (int f = 0; f < fields; ++f) b.ids.push_back(CtrId(f, rng() % values));
  }
  return b;
}

std::vector<float> RandomFloats(size_t n, float stddev, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Glorot weights plus small random biases (zero biases would hide bias
// gradient errors behind symmetric activations).
std::vector<float> Params(const CtrReplica& m, uint64_t seed) {
  std::vector<float> p = InitParameters(m.tensors(), seed);
  const std::vector<float> noise = RandomFloats(p.size(), 0.1f, seed + 1);
  for (size_t i = 0; i < p.size(); ++i) p[i] += noise[i];
  return p;
}

// The model's loss in double, straight from the definition.
double ReferenceLoss(const ModelSpec& spec, const CtrReplica& m,
                     const std::vector<double>& params,
                     const std::vector<double>& rows, const CtrBatch& batch) {
  const std::vector<uint32_t> widths = ModelLayerWidths(spec);
  std::unordered_map<uint64_t, size_t> row_of;
  for (size_t u = 0; u < m.num_unique(); ++u) row_of[m.unique_ids()[u]] = u;
  const int F = m.fields(), D = m.dense_features(), dim = m.embedding_dim();
  double loss = 0;
  for (size_t b = 0; b < batch.size; ++b) {
    std::vector<double> x;
    for (int f = 0; f < F; ++f) {
      const size_t u = row_of.at(batch.ids[b * F + f]);
      for (int k = 0; k < dim; ++k) x.push_back(rows[u * dim + k]);
    }
    for (int j = 0; j < D; ++j) x.push_back(batch.dense[b * D + j]);
    size_t offset = 0;
    for (size_t l = 0; l + 1 < widths.size(); ++l) {
      const size_t in = widths[l], out = widths[l + 1];
      std::vector<double> y(out);
      for (size_t o = 0; o < out; ++o) {
        double s = params[offset + in * out + o];
        for (size_t i = 0; i < in; ++i)
          s += x[i] * params[offset + i * out + o];
        y[o] = l + 2 < widths.size() ? std::max(s, 0.0) : s;
      }
      offset += in * out + out;
      x = y;
    }
    const double z = x[0], label = batch.labels[b];
    loss += std::log1p(std::exp(-std::abs(z))) + std::max(z, 0.0) - z * label;
  }
  return loss;
}

// Central differences of ReferenceLoss with respect to each element of `v`
// (params or rows), against the model's float gradient.
void CheckAgainstNumerical(const std::vector<float>& got,
                           std::vector<double>* v,
                           const std::function<double()>& loss,
                           const std::string& what) {
  constexpr double kStep = 1e-6;
  ASSERT_EQ(got.size(), v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    const double keep = (*v)[i];
    (*v)[i] = keep + kStep;
    const double up = loss();
    (*v)[i] = keep - kStep;
    const double down = loss();
    (*v)[i] = keep;
    const double want = (up - down) / (2 * kStep);
    ASSERT_NEAR(got[i], want, 1e-4 + 1e-3 * std::abs(want))
        << what << " [" << i << "]";
  }
}

TEST(CtrReplicaTest, ShapesFollowTheSpec) {
  auto cpu = Cpu();
  auto m = MakeModel(Tiny(), cpu.get(), 8);
  EXPECT_EQ(m->fields(), 3);
  EXPECT_EQ(m->embedding_dim(), 2);
  EXPECT_EQ(m->dense_features(), 2);
  EXPECT_EQ(m->input_dim(), 8u);
  EXPECT_EQ(m->num_parameters(), 8u * 4 + 4 + 4 * 1 + 1);
  EXPECT_EQ(m->tensors().size(), 4u);
  EXPECT_EQ(m->batch_size(), 0u);
  EXPECT_EQ(m->num_unique(), 0u);

  // Criteo defaults: 26 x 16 + 13 inputs, hidden [256, 128].
  ModelSpec criteo;
  criteo.mutable_ctr()->set_table("emb");
  criteo.mutable_ctr()->set_embedding_dim(16);
  auto c = MakeModel(criteo, cpu.get(), 4);
  EXPECT_EQ(c->fields(), 26);
  EXPECT_EQ(c->dense_features(), 13);
  EXPECT_EQ(c->input_dim(), 26u * 16 + 13);
  EXPECT_EQ(c->num_parameters(), 429u * 256 + 256 + 256u * 128 + 128 + 128 + 1);
}

TEST(CtrReplicaTest, GradientsMatchNumericalDifferences) {
  const ModelSpec spec = Tiny();
  auto cpu = Cpu();
  auto m = MakeModel(spec, cpu.get(), 8);
  // 6 examples, 2 values per field: most ids repeat across examples.
  const CtrBatch batch = RandomBatch(6, 3, 2, 2, 11);
  ASSERT_TRUE(m->Prepare(batch).ok());
  const size_t U = m->num_unique();
  ASSERT_LT(U, 6u * 3);
  const std::vector<float> params = Params(*m, 12);
  const std::vector<float> rows = RandomFloats(U * 2, 0.5f, 13);
  std::vector<float> grad(m->num_parameters()), row_grads(U * 2);
  double loss;
  ASSERT_TRUE(m->ComputeGradient(params.data(), rows.data(), grad.data(),
                                 row_grads.data(), &loss)
                  .ok());

  std::vector<double> p(params.begin(), params.end());
  std::vector<double> r(rows.begin(), rows.end());
  const auto ref = [&] { return ReferenceLoss(spec, *m, p, r, batch); };
  EXPECT_NEAR(loss, ref(), 1e-5 * ref());
  CheckAgainstNumerical(grad, &p, ref, "dense");
  CheckAgainstNumerical(row_grads, &r, ref, "rows");

  // grad_scale scales both gradients, not the loss.
  std::vector<float> half(grad.size()), half_rows(row_grads.size());
  double half_loss;
  ASSERT_TRUE(m->ComputeGradient(params.data(), rows.data(), half.data(),
                                 half_rows.data(), &half_loss, 0.5f)
                  .ok());
  EXPECT_EQ(half_loss, loss);
  for (size_t i = 0; i < grad.size(); ++i) {
    EXPECT_NEAR(half[i], 0.5f * grad[i], 1e-6f * (1 + std::abs(grad[i])));
  }
  for (size_t i = 0; i < row_grads.size(); ++i) {
    EXPECT_NEAR(half_rows[i], 0.5f * row_grads[i],
                1e-6f * (1 + std::abs(row_grads[i])));
  }
}

TEST(CtrReplicaTest, DuplicateIdsSumTheirExamplesRowGradients) {
  const ModelSpec spec = Tiny();
  auto cpu = Cpu();
  auto m = MakeModel(spec, cpu.get(), 4);
  const std::vector<float> params = Params(*m, 3);
  // Two examples that share field 0's id (and nothing else).
  CtrBatch both = RandomBatch(2, 3, 2, 1000, 4);
  both.ids[0] = both.ids[3] = CtrId(0, 7);
  both.ids[1] = CtrId(1, 1);
  both.ids[4] = CtrId(1, 2);
  both.ids[2] = CtrId(2, 1);
  both.ids[5] = CtrId(2, 2);
  both.labels = {1.0f, 0.0f};
  ASSERT_TRUE(m->Prepare(both).ok());
  ASSERT_EQ(m->num_unique(), 5u);
  EXPECT_EQ(m->unique_ids()[0], CtrId(0, 7));
  // Rows by id, so each single-example run finds the same values.
  std::unordered_map<uint64_t, std::vector<float>> table;
  const std::vector<float> values = RandomFloats(5 * 2, 0.5f, 5);
  for (size_t u = 0; u < 5; ++u) {
    table[m->unique_ids()[u]] = {values[2 * u], values[2 * u + 1]};
  }
  const auto run = [&](const CtrBatch& b, std::vector<float>* grad,
                       std::unordered_map<uint64_t, std::vector<float>>* rg) {
    ASSERT_TRUE(m->Prepare(b).ok());
    std::vector<float> rows;
    for (uint64_t id : m->unique_ids()) {
      rows.insert(rows.end(), table[id].begin(), table[id].end());
    }
    std::vector<float> row_grads(rows.size());
    grad->assign(m->num_parameters(), 0.0f);
    ASSERT_TRUE(m->ComputeGradient(params.data(), rows.data(), grad->data(),
                                   row_grads.data(), nullptr)
                    .ok());
    for (size_t u = 0; u < m->num_unique(); ++u) {
      std::vector<float>& g = (*rg)[m->unique_ids()[u]];
      g.resize(2, 0.0f);
      g[0] += row_grads[2 * u];
      g[1] += row_grads[2 * u + 1];
    }
  };
  std::vector<float> grad_both, grad_0, grad_1;
  std::unordered_map<uint64_t, std::vector<float>> rg_both, rg_split;
  run(both, &grad_both, &rg_both);
  CtrBatch first = both, second = both;
  first.Resize(1);
  first.labels = {both.labels[0]};
  first.dense.assign(both.dense.begin(), both.dense.begin() + 2);
  first.ids.assign(both.ids.begin(), both.ids.begin() + 3);
  second.size = 1;
  second.labels = {both.labels[1]};
  second.dense.assign(both.dense.begin() + 2, both.dense.end());
  second.ids.assign(both.ids.begin() + 3, both.ids.end());
  run(first, &grad_0, &rg_split);
  run(second, &grad_1, &rg_split);

  ASSERT_EQ(rg_both.size(), 5u);
  for (const auto& [id, g] : rg_both) {
    ASSERT_EQ(rg_split.count(id), 1u);
    for (int k = 0; k < 2; ++k) {
      EXPECT_NEAR(g[k], rg_split[id][k], 1e-6f) << "id " << id << " " << k;
    }
  }
  // The shared row really got two non-zero contributions.
  EXPECT_NE(rg_both[CtrId(0, 7)], rg_both[CtrId(1, 1)]);
  for (size_t i = 0; i < grad_both.size(); ++i) {
    EXPECT_NEAR(grad_both[i], grad_0[i] + grad_1[i], 1e-6f) << i;
  }
}

// 1 field x dim 1 + 1 dense -> 1 -> 1, weights set by hand:
//   h = relu(1 * e + 2 * d + 0.5), z = 3 * h - 1.
TEST(CtrReplicaTest, LossAndGradientByHand) {
  auto cpu = Cpu();
  auto m = MakeModel(Ctr(1, 1, 1, {1}), cpu.get(), 4);
  const std::vector<float> params = {1.0f, 2.0f, 0.5f, 3.0f, -1.0f};
  ASSERT_EQ(params.size(), m->num_parameters());
  CtrBatch b;
  b.size = 3;
  b.labels = {1.0f, 0.0f, 0.0f};
  b.dense = {0.25f, 0.0f, 0.0f};
  b.ids = {CtrId(0, 1), CtrId(0, 2), CtrId(0, 3)};
  ASSERT_TRUE(m->Prepare(b).ok());
  const std::vector<float> rows = {1.0f, -2.0f, 20.0f};
  // z = 5 (label 1), -1 (h clipped to 0, label 0), 60.5 (label 0: the loss
  // is 60.5 itself, where a naive -log(1 - sigmoid) would give inf).
  const double want_loss =
      std::log1p(std::exp(-5.0)) + std::log1p(std::exp(-1.0)) + 60.5;
  std::vector<float> grad(5), row_grads(3);
  double loss;
  ASSERT_TRUE(m->ComputeGradient(params.data(), rows.data(), grad.data(),
                                 row_grads.data(), &loss)
                  .ok());
  EXPECT_NEAR(loss, want_loss, 1e-9);
  const double s5 = 1 / (1 + std::exp(-5.0)), s1 = 1 / (1 + std::exp(1.0));
  const double d0 = s5 - 1, d1 = s1, d2 = 1.0;         // d(loss)/dz per example
  EXPECT_NEAR(grad[4], d0 + d1 + d2, 1e-6);            // fc1/b
  EXPECT_NEAR(grad[3], d0 * 2 + d2 * 20.5, 1e-4);      // fc1/w: h = 2, 0, 20.5
  EXPECT_NEAR(grad[2], 3 * (d0 + d2), 1e-6);           // fc0/b (h > 0 only)
  EXPECT_NEAR(grad[0], 3 * (d0 * 1 + d2 * 20), 1e-4);  // fc0/w, e
  EXPECT_NEAR(grad[1], 3 * (d0 * 0.25), 1e-6);         // fc0/w, d
  EXPECT_NEAR(row_grads[0], 3 * d0, 1e-6);
  EXPECT_EQ(row_grads[1], 0.0f);  // its ReLU is off
  EXPECT_NEAR(row_grads[2], 3 * d2, 1e-6);

  std::vector<float> probs(3);
  ASSERT_TRUE(m->Predict(params.data(), rows.data(), probs.data()).ok());
  EXPECT_NEAR(probs[0], s5, 1e-7);
  EXPECT_NEAR(probs[1], s1, 1e-7);
  EXPECT_EQ(probs[2], 1.0f);
}

TEST(CtrReplicaTest, PredictMatchesTheTrainingForwardPass) {
  const ModelSpec spec = Ctr(5, 4, 3, {8, 6});
  auto cpu = Cpu();
  auto m = MakeModel(spec, cpu.get(), 32);
  const CtrBatch batch = RandomBatch(32, 5, 3, 10, 8);
  ASSERT_TRUE(m->Prepare(batch).ok());
  const std::vector<float> params = Params(*m, 9);
  const std::vector<float> rows = RandomFloats(m->num_unique() * 4, 0.5f, 10);
  std::vector<float> grad(m->num_parameters()), row_grads(rows.size());
  std::vector<float> probs(32, -1.0f);
  double loss;
  ASSERT_TRUE(m->Predict(params.data(), rows.data(), probs.data()).ok());
  ASSERT_TRUE(m->ComputeGradient(params.data(), rows.data(), grad.data(),
                                 row_grads.data(), &loss)
                  .ok());
  double from_probs = 0;
  for (size_t b = 0; b < 32; ++b) {
    ASSERT_GT(probs[b], 0.0f);
    ASSERT_LT(probs[b], 1.0f);
    from_probs -= batch.labels[b] == 1.0f ? std::log(probs[b])
                                          : std::log1p(-double{probs[b]});
  }
  EXPECT_NEAR(from_probs, loss, 1e-5 * loss);
  // Predict again after a gradient: the same bits.
  std::vector<float> again(32);
  ASSERT_TRUE(m->Predict(params.data(), rows.data(), again.data()).ok());
  EXPECT_EQ(again, probs);
}

struct StepResult {
  std::vector<float> grad;
  std::vector<float> row_grads;
  std::vector<float> probs;
  double loss = 0;
  std::vector<uint64_t> unique_ids;
};

StepResult Step(CtrReplica* m, const CtrBatch& batch, uint64_t seed,
                float grad_scale) {
  StepResult r;
  EXPECT_TRUE(m->Prepare(batch).ok());
  r.unique_ids.assign(m->unique_ids().begin(), m->unique_ids().end());
  const std::vector<float> params = Params(*m, seed);
  const std::vector<float> rows =
      RandomFloats(m->num_unique() * m->embedding_dim(), 0.3f, seed + 7);
  r.grad.assign(m->num_parameters(), 9.0f);
  r.row_grads.assign(rows.size(), 9.0f);
  r.probs.assign(batch.size, 9.0f);
  EXPECT_TRUE(m->ComputeGradient(params.data(), rows.data(), r.grad.data(),
                                 r.row_grads.data(), &r.loss, grad_scale)
                  .ok());
  EXPECT_TRUE(m->Predict(params.data(), rows.data(), r.probs.data()).ok());
  return r;
}

void ExpectBitwiseEqual(const StepResult& a, const StepResult& b) {
  EXPECT_EQ(a.unique_ids, b.unique_ids);
  EXPECT_EQ(a.grad, b.grad);
  EXPECT_EQ(a.row_grads, b.row_grads);
  EXPECT_EQ(a.probs, b.probs);
  EXPECT_EQ(a.loss, b.loss);
}

TEST(CtrReplicaTest, DeterministicBitForBit) {
  const ModelSpec spec = Ctr(26, 4, 13, {16, 8});
  auto cpu0 = Cpu(0);
  auto cpu1 = Cpu(1);
  auto a = MakeModel(spec, cpu0.get(), 64);
  auto b = MakeModel(spec, cpu1.get(), 64);
  const CtrBatch batch = RandomBatch(64, 26, 13, 50, 1);
  const StepResult first = Step(a.get(), batch, 2, 1.0f / 64);
  // Another batch in between must leave no trace.
  Step(a.get(), RandomBatch(40, 26, 13, 9, 3), 4, 1.0f);
  ExpectBitwiseEqual(Step(a.get(), batch, 2, 1.0f / 64), first);
  ExpectBitwiseEqual(Step(b.get(), batch, 2, 1.0f / 64), first);
}

// The device path (staging, index uploads, logits down and d(logits) up) on
// a backend that defers all work to Synchronize() and rejects host pointers
// in compute calls: the same arithmetic as the CPU path, so the same bits.
TEST(CtrReplicaTest, DevicePathMatchesHostPathExactly) {
  const ModelSpec spec = Ctr(7, 3, 4, {10, 5});
  auto cpu = Cpu();
  DeferredBackend dev;
  auto host_model = MakeModel(spec, cpu.get(), 16);
  auto dev_model = MakeModel(spec, &dev, 16);
  for (size_t n : {size_t{16}, size_t{1}, size_t{0}, size_t{9}}) {
    SCOPED_TRACE(n);
    const CtrBatch batch = RandomBatch(n, 7, 4, 5, n);
    const StepResult want = Step(host_model.get(), batch, n + 1, 0.25f);
    const StepResult got = Step(dev_model.get(), batch, n + 1, 0.25f);
    ExpectBitwiseEqual(got, want);
  }
}

TEST(CtrReplicaTest, EmptyBatchGivesZeroGradient) {
  auto cpu = Cpu();
  auto m = MakeModel(Tiny(), cpu.get(), 4);
  CtrBatch empty;
  ASSERT_TRUE(m->Prepare(empty).ok());
  EXPECT_EQ(m->num_unique(), 0u);
  const std::vector<float> params = Params(*m, 1);
  std::vector<float> grad(m->num_parameters(), 9.0f);
  double loss = 9;
  ASSERT_TRUE(
      m->ComputeGradient(params.data(), nullptr, grad.data(), nullptr, &loss)
          .ok());
  EXPECT_EQ(grad, std::vector<float>(grad.size(), 0.0f));
  EXPECT_EQ(loss, 0.0);
  EXPECT_TRUE(m->Predict(params.data(), nullptr, nullptr).ok());
}

TEST(CtrReplicaTest, CreateRejectsBadArguments) {
  auto cpu = Cpu();
  ModelSpec mlp;
  mlp.mutable_mlp()->set_input_dim(4);
  mlp.mutable_mlp()->set_num_classes(2);
  struct Case {
    ModelSpec spec;
    Backend* backend;
    size_t max_batch;
    std::string field;
  };
  ModelSpec no_dim = Tiny();
  no_dim.mutable_ctr()->set_embedding_dim(0);
  const std::vector<Case> cases = {
      {mlp, cpu.get(), 4, "model.ctr"},
      {no_dim, cpu.get(), 4, "model.ctr.embedding_dim"},
      {Tiny(), nullptr, 4, "backend"},
      {Tiny(), cpu.get(), 0, "max_batch"},
      {Tiny(), cpu.get(), CtrReplica::kMaxBatch + 1, "max_batch"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::unique_ptr<CtrReplica>> m =
        CtrReplica::Create(c.spec, c.backend, c.max_batch);
    ASSERT_FALSE(m.ok()) << c.field;
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().message().find(c.field), std::string::npos)
        << m.status();
  }
}

TEST(CtrReplicaTest, PrepareRejectsBadBatchesAndKeepsThePreviousOne) {
  auto cpu = Cpu();
  auto m = MakeModel(Tiny(), cpu.get(), 4);
  const CtrBatch good = RandomBatch(3, 3, 2, 100, 1);
  ASSERT_TRUE(m->Prepare(good).ok());
  const std::vector<uint64_t> ids(m->unique_ids().begin(),
                                  m->unique_ids().end());
  const std::vector<float> params = Params(*m, 2);
  const std::vector<float> rows = RandomFloats(ids.size() * 2, 0.5f, 3);
  std::vector<float> want(m->num_parameters()), row_want(rows.size());
  double want_loss;
  ASSERT_TRUE(m->ComputeGradient(params.data(), rows.data(), want.data(),
                                 row_want.data(), &want_loss)
                  .ok());

  struct Case {
    std::string name;
    std::function<void(CtrBatch*)> spoil;
    std::string field;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<Case> cases = {
      {"too big", [](CtrBatch* b) { *b = RandomBatch(5, 3, 2, 9, 1); },
       "batch.size"},
      {"labels short", [](CtrBatch* b) { b->labels.pop_back(); },
       "batch.labels"},
      {"dense long", [](CtrBatch* b) { b->dense.push_back(0); }, "batch.dense"},
      {"ids short", [](CtrBatch* b) { b->ids.pop_back(); }, "batch.ids"},
      {"criteo layout", [](CtrBatch* b) { b->Resize(2); }, "batch.dense"},
      {"label 0.5", [](CtrBatch* b) { b->labels[1] = 0.5f; },
       "batch.labels[1]"},
      {"label 2", [](CtrBatch* b) { b->labels[2] = 2.0f; }, "batch.labels[2]"},
      {"label NaN", [&](CtrBatch* b) { b->labels[0] = nan; },
       "batch.labels[0]"},
      {"dense inf",
       [](CtrBatch* b) {
         b->dense[3] = std::numeric_limits<float>::infinity();
       },
       "batch.dense[3] (example 1, feature 1)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    CtrBatch bad = RandomBatch(3, 3, 2, 7, 99);
    c.spoil(&bad);
    const absl::Status s = m->Prepare(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(c.field), std::string::npos) << s;
    // The good batch is still the prepared one.
    EXPECT_EQ(m->batch_size(), 3u);
    EXPECT_EQ(
        std::vector<uint64_t>(m->unique_ids().begin(), m->unique_ids().end()),
        ids);
    std::vector<float> got(want.size()), row_got(row_want.size());
    double loss;
    ASSERT_TRUE(m->ComputeGradient(params.data(), rows.data(), got.data(),
                                   row_got.data(), &loss)
                    .ok());
    EXPECT_EQ(got, want);
    EXPECT_EQ(row_got, row_want);
    EXPECT_EQ(loss, want_loss);
  }
}

TEST(CtrReplicaTest, CallsRejectNullBuffersAndMissingBatch) {
  auto cpu = Cpu();
  auto m = MakeModel(Tiny(), cpu.get(), 4);
  const std::vector<float> params = Params(*m, 1);
  std::vector<float> grad(m->num_parameters()), rows(64), row_grads(64),
      probs(4);
  double loss;
  EXPECT_EQ(m->ComputeGradient(params.data(), rows.data(), grad.data(),
                               row_grads.data(), &loss)
                .code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(m->Predict(params.data(), rows.data(), probs.data()).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(m->Prepare(RandomBatch(4, 3, 2, 5, 1)).ok());
  const auto expect = [](const absl::Status& s, const std::string& field) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(field), std::string::npos) << s;
  };
  expect(m->ComputeGradient(nullptr, rows.data(), grad.data(), row_grads.data(),
                            &loss),
         "dense_params");
  expect(m->ComputeGradient(params.data(), nullptr, grad.data(),
                            row_grads.data(), &loss),
         "rows");
  expect(m->ComputeGradient(params.data(), rows.data(), nullptr,
                            row_grads.data(), &loss),
         "dense_grad");
  expect(m->ComputeGradient(params.data(), rows.data(), grad.data(), nullptr,
                            &loss),
         "row_grads");
  expect(m->Predict(params.data(), rows.data(), nullptr), "probs");
  expect(m->Predict(nullptr, rows.data(), probs.data()), "dense_params");
  // A null loss_sum is allowed.
  EXPECT_TRUE(m->ComputeGradient(params.data(), rows.data(), grad.data(),
                                 row_grads.data(), nullptr)
                  .ok());
}

// End to end: SGD on rows and dense parameters fits a planted rule (the
// label is the parity of field 0's value), which only the embeddings can
// carry.
TEST(CtrReplicaTest, TrainsWithSgd) {
  const ModelSpec spec = Ctr(3, 4, 2, {8});
  auto cpu = Cpu();
  auto m = MakeModel(spec, cpu.get(), 64);
  CtrBatch batch = RandomBatch(64, 3, 2, 16, 5);
  for (size_t b = 0; b < batch.size; ++b) {
    batch.labels[b] = static_cast<float>(CtrIdValue(batch.ids[b * 3]) % 2);
  }
  ASSERT_TRUE(m->Prepare(batch).ok());
  std::vector<float> params = Params(*m, 6);
  std::vector<float> rows = RandomFloats(m->num_unique() * 4, 0.1f, 7);
  std::vector<float> grad(params.size()), row_grads(rows.size());
  double start = 0, loss = 0;
  constexpr float kRate = 0.5f;
  for (int step = 0; step < 200; ++step) {
    ASSERT_TRUE(m->ComputeGradient(params.data(), rows.data(), grad.data(),
                                   row_grads.data(), &loss, 1.0f / 64)
                    .ok());
    if (step == 0) start = loss;
    for (size_t i = 0; i < params.size(); ++i) params[i] -= kRate * grad[i];
    for (size_t i = 0; i < rows.size(); ++i) rows[i] -= kRate * row_grads[i];
  }
  EXPECT_LT(loss, 0.1 * start) << "start " << start << " end " << loss;
}

}  // namespace
}  // namespace ps
