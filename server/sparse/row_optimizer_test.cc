#include "server/sparse/row_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/optimizer.h"
#include "server/testing/test_rng.h"

namespace ps {
namespace {

using K = RowOptimizerKind;

double Sign(double x) { return x > 0 ? 1 : (x < 0 ? -1 : 0); }

// Float64 reference of one row, written from the papers' formulas rather
// than from row_optimizer.cc: plain state (accumulators hold their full
// value, FTRL keeps z per element with a flag for "seen a gradient").
struct RefRow {
  std::vector<double> w, a, b;  // weights and the kind's two slots
  std::vector<bool> seen;       // FTRL: element had a non-zero gradient
  int t = 0;                    // Adam: updates of this row

  RefRow(const RowOptimizerOptions& o, const std::vector<float>& init)
      : w(init.begin(), init.end()),
        a(init.size(), o.initial_accumulator),
        b(init.size(), 0.0),
        seen(init.size(), false) {}

  void Step(const RowOptimizerOptions& o, const float* grad) {
    ++t;
    const double lr = o.learning_rate, wd = o.weight_decay;
    for (size_t i = 0; i < w.size(); ++i) {
      double g = grad[i];
      switch (o.kind) {
        case K::kSgd:
          w[i] -= lr * (g + wd * w[i]);
          break;
        case K::kAdagrad:
          g += wd * w[i];
          a[i] += g * g;
          w[i] -= lr * g / (std::sqrt(a[i]) + *o.epsilon);
          break;
        case K::kFtrl: {  // a = n, b = z
          const double beta = *o.ftrl_beta, l1 = o.l1, l2 = o.l2;
          if (!seen[i]) {
            b[i] =
                -w[i] * ((beta + std::sqrt(a[i])) / lr + l2) - Sign(w[i]) * l1;
          }
          if (g == 0) break;
          seen[i] = true;
          const double sigma = (std::sqrt(a[i] + g * g) - std::sqrt(a[i])) / lr;
          b[i] += g - sigma * w[i];
          a[i] += g * g;
          w[i] = std::fabs(b[i]) <= l1
                     ? 0.0
                     : -(b[i] - Sign(b[i]) * l1) /
                           ((beta + std::sqrt(a[i])) / lr + l2);
          break;
        }
        case K::kAdam: {  // a = m, b = v
          g += wd * w[i];
          const double b1 = *o.beta1, b2 = *o.beta2;
          a[i] = b1 * a[i] + (1 - b1) * g;
          b[i] = b2 * b[i] + (1 - b2) * g * g;
          const double mhat = a[i] / (1 - std::pow(b1, t));
          const double vhat = b[i] / (1 - std::pow(b2, t));
          w[i] -= lr * mhat / (std::sqrt(vhat) + *o.epsilon);
          break;
        }
        case K::kUnspecified:
          ADD_FAILURE() << "no kind";
      }
    }
  }
};

std::unique_ptr<RowOptimizer> MustCreate(const RowOptimizerOptions& o) {
  absl::StatusOr<std::unique_ptr<RowOptimizer>> opt = RowOptimizer::Create(o);
  EXPECT_TRUE(opt.ok()) << opt.status();
  return opt.ok() ? std::move(opt).value() : nullptr;
}

RowOptimizerOptions Opts(K kind, float lr) {
  RowOptimizerOptions o;
  o.kind = kind;
  o.learning_rate = lr;
  return o;
}

struct RefCase {
  std::string name;
  RowOptimizerOptions options;
};

std::vector<RefCase> RefCases() {
  std::vector<RefCase> cases;
  cases.push_back({"Sgd", Opts(K::kSgd, 0.1f)});
  RowOptimizerOptions o = Opts(K::kSgd, 0.1f);
  o.weight_decay = 0.01f;
  cases.push_back({"SgdWeightDecay", o});
  cases.push_back({"Adagrad", Opts(K::kAdagrad, 0.05f)});
  o = Opts(K::kAdagrad, 0.05f);
  o.initial_accumulator = 0.1f;
  o.weight_decay = 0.001f;
  o.epsilon = 1e-6f;
  cases.push_back({"AdagradInitialAccumulatorWeightDecay", o});
  o = Opts(K::kFtrl, 0.05f);
  o.l1 = 0.001f;
  o.l2 = 0.01f;
  cases.push_back({"Ftrl", o});
  o = Opts(K::kFtrl, 0.1f);
  o.ftrl_beta = 0.0f;
  o.initial_accumulator = 0.1f;  // TensorFlow's defaults
  o.l1 = 0.02f;
  cases.push_back({"FtrlTfStyleL1", o});
  cases.push_back({"Adam", Opts(K::kAdam, 0.01f)});
  o = Opts(K::kAdam, 0.01f);
  o.beta1 = 0.0f;
  o.beta2 = 0.99f;
  o.epsilon = 1e-6f;
  o.weight_decay = 0.01f;
  cases.push_back({"AdamBeta1ZeroWeightDecay", o});
  return cases;
}

void PrintTo(const RefCase& c, std::ostream* os) { *os << c.name; }

class ReferenceTest : public ::testing::TestWithParam<RefCase> {};

// A table of kRows rows over 40 steps; each step pushes a random third of
// the rows (every tenth gradient element exactly 0). Touched rows track the
// float64 reference: ||w - ref|| / ||ref|| over all rows stays under 1e-6
// at every step (float rounding; about 1.4e-7 measured). Untouched rows keep
// weights and state bit for bit.
TEST_P(ReferenceTest, TracksFloat64ReferenceAndLeavesUntouchedRowsAlone) {
  const RefCase& c = GetParam();
  std::unique_ptr<RowOptimizer> opt = MustCreate(c.options);
  ASSERT_NE(opt, nullptr);
  const RowOptimizerOptions& o = opt->options();  // defaults filled
  constexpr int kRows = 48;
  constexpr int kDim = 19;  // odd: covers the vector loops' tails
  const int sf = opt->StateFloatsPerRow(kDim);
  TestRng rng(7);
  std::vector<std::vector<float>> rows(kRows, std::vector<float>(kDim));
  std::vector<std::vector<float>> states(kRows, std::vector<float>(sf, 0.0f));
  std::vector<RefRow> refs;
  for (auto& row : rows) {
    for (float& x : row) x = rng.Bell(0.2);
    refs.emplace_back(o, row);
  }
  std::vector<float> grad(kDim);
  double worst = 0;
  for (int step = 0; step < 40; ++step) {
    const std::vector<std::vector<float>> rows_before = rows;
    const std::vector<std::vector<float>> states_before = states;
    std::vector<bool> touched(kRows);
    for (int r = 0; r < kRows; ++r) {
      touched[r] = rng.Uniform() < 1.0 / 3;
      if (!touched[r]) continue;
      for (int i = 0; i < kDim; ++i) {
        // A weak pull toward 0 plus noise: weights keep their magnitude, so
        // the relative error measures rounding, not shrinkage.
        grad[i] = i % 10 == 3 ? 0.0f : 0.05f * rows[r][i] + rng.Bell(0.05);
      }
      opt->Update(rows[r].data(), states[r].data(), grad.data(), kDim);
      refs[r].Step(o, grad.data());
    }
    for (int r = 0; r < kRows; ++r) {
      if (touched[r]) continue;
      ASSERT_EQ(0, std::memcmp(rows_before[r].data(), rows[r].data(),
                               kDim * sizeof(float)))
          << c.name << " row " << r << " step " << step;
      ASSERT_EQ(0, std::memcmp(states_before[r].data(), states[r].data(),
                               sf * sizeof(float)))
          << c.name << " row " << r << " step " << step;
    }
    double diff2 = 0, ref2 = 0;
    for (int r = 0; r < kRows; ++r) {
      for (int i = 0; i < kDim; ++i) {
        const double d = rows[r][i] - refs[r].w[i];
        diff2 += d * d;
        ref2 += refs[r].w[i] * refs[r].w[i];
      }
    }
    const double rel = std::sqrt(diff2 / ref2);
    worst = std::max(worst, rel);
    ASSERT_LE(rel, 1e-6) << c.name << " step " << step;
  }
  if (o.kind == K::kAdam) {
    for (int r = 0; r < kRows; ++r) {
      EXPECT_EQ(states[r][2 * kDim], static_cast<float>(refs[r].t)) << r;
    }
  }
  for (int r = 0; r < kRows; ++r) {
    EXPECT_TRUE(opt->CheckState(states[r].data(), kDim).ok()) << r;
  }
  std::printf("%s: worst relative error %.3g\n", c.name.c_str(), worst);
  RecordProperty("worst_relative_error", absl::StrCat(worst));
}

INSTANTIATE_TEST_SUITE_P(AllKinds, ReferenceTest,
                         ::testing::ValuesIn(RefCases()),
                         [](const auto& info) { return info.param.name; });

// With l1 far above the gradients, FTRL weights are exact zeros: a
// zero-initialized row whose gradients sum to less than l1 never leaves 0,
// and random-initialized weights that a steady gradient drives across 0
// stop at exactly 0 (for about 2 l1 / |g| steps). The same runs with l1 = 0
// end non-zero, so the zeros are l1's doing.
std::vector<float> FtrlRunEnd(float l1, bool random_init, int steps) {
  RowOptimizerOptions o = Opts(K::kFtrl, 0.1f);
  o.l1 = l1;
  std::unique_ptr<RowOptimizer> opt = MustCreate(o);
  constexpr int kDim = 16;
  TestRng rng(11);
  std::vector<float> row(kDim, 0.0f), state(2 * kDim, 0.0f), grad(kDim);
  if (random_init) {
    for (float& x : row) x = rng.Bell(0.2);
  }
  const std::vector<float> init = row;
  for (int step = 0; step < steps; ++step) {
    for (int i = 0; i < kDim; ++i) {
      grad[i] = random_init ? (init[i] > 0 ? 1.0f : -1.0f) : rng.Bell(0.5);
    }
    opt->Update(row.data(), state.data(), grad.data(), kDim);
    if (l1 > 0 && !random_init) {
      EXPECT_THAT(row, ::testing::Each(0.0f)) << step;
    }
  }
  return row;
}

TEST(RowOptimizerTest, FtrlLargeL1GivesExactZeros) {
  EXPECT_THAT(FtrlRunEnd(50.0f, /*random_init=*/false, 200),
              ::testing::Each(0.0f));
  EXPECT_THAT(FtrlRunEnd(50.0f, /*random_init=*/true, 20),
              ::testing::Each(0.0f));
  EXPECT_THAT(FtrlRunEnd(50.0f, /*random_init=*/true, 80),
              ::testing::Each(0.0f));
  EXPECT_THAT(FtrlRunEnd(0.0f, /*random_init=*/false, 200),
              ::testing::Each(::testing::Ne(0.0f)));
  EXPECT_THAT(FtrlRunEnd(0.0f, /*random_init=*/true, 20),
              ::testing::Each(::testing::Ne(0.0f)));
}

// A new row's first FTRL update continues from its initial weight: a tiny
// gradient moves it a tiny step (TensorFlow's z = 0 start would not).
TEST(RowOptimizerTest, FtrlKeepsTheInitialWeight) {
  RowOptimizerOptions o = Opts(K::kFtrl, 0.1f);
  o.l1 = 0.5f;
  o.l2 = 0.25f;
  std::unique_ptr<RowOptimizer> opt = MustCreate(o);
  std::vector<float> row = {0.3f, -0.2f, 0.0f, 0.1f};
  const std::vector<float> init = row;
  std::vector<float> state(8, 0.0f);
  const std::vector<float> grad = {1e-6f, -1e-6f, 1e-6f, 0.0f};
  opt->Update(row.data(), state.data(), grad.data(), 4);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(row[i], init[i], 1e-6) << i;
  EXPECT_EQ(row[2], 0.0f);     // inside the l1 band
  EXPECT_EQ(row[3], init[3]);  // zero gradient: untouched, bit for bit
  EXPECT_EQ(state[3], 0.0f);
  EXPECT_EQ(state[4 + 3], 0.0f);
}

// Zero gradients from a fresh state, with every initial accumulator at 0
// (the divisions' worst case): no NaN, and rows without weight decay stay
// bit for bit.
TEST(RowOptimizerTest, ZeroGradientsGiveNoNanAndNoChange) {
  std::vector<RowOptimizerOptions> all = {
      Opts(K::kSgd, 0.1f), Opts(K::kAdagrad, 0.1f), Opts(K::kFtrl, 0.1f),
      Opts(K::kAdam, 0.1f)};
  RowOptimizerOptions ftrl_l2 = Opts(K::kFtrl, 0.1f);
  ftrl_l2.ftrl_beta = 0.0f;
  ftrl_l2.l2 = 1.0f;
  all.push_back(ftrl_l2);
  constexpr int kDim = 9;
  for (const RowOptimizerOptions& o : all) {
    std::unique_ptr<RowOptimizer> opt = MustCreate(o);
    for (float init : {0.0f, 0.25f, -3.0f}) {
      std::vector<float> row(kDim, init);
      std::vector<float> state(opt->StateFloatsPerRow(kDim), 0.0f);
      const std::vector<float> grad(kDim, 0.0f);
      for (int step = 0; step < 100; ++step) {
        opt->Update(row.data(), state.data(), grad.data(), kDim);
      }
      EXPECT_THAT(row, ::testing::Each(init))
          << RowOptimizerKindName(o.kind) << " init " << init;
      for (float x : state) EXPECT_TRUE(std::isfinite(x));
      EXPECT_TRUE(opt->CheckState(state.data(), kDim).ok());
    }
  }
}

// Adam's per-row t stops at 2^24 and the update stays finite there.
TEST(RowOptimizerTest, AdamStepCountSaturates) {
  std::unique_ptr<RowOptimizer> opt = MustCreate(Opts(K::kAdam, 0.01f));
  std::vector<float> row = {0.5f, -0.5f};
  std::vector<float> state = {0.0f, 0.0f, 0.0f, 0.0f, 16777215.0f};
  const std::vector<float> grad = {0.1f, -0.1f};
  opt->Update(row.data(), state.data(), grad.data(), 2);
  EXPECT_EQ(state[4], 16777216.0f);
  opt->Update(row.data(), state.data(), grad.data(), 2);
  EXPECT_EQ(state[4], 16777216.0f);
  EXPECT_TRUE(std::isfinite(row[0]) && std::isfinite(row[1]));
  EXPECT_LT(row[0], 0.5f);
  EXPECT_TRUE(opt->CheckState(state.data(), 2).ok());
}

// One Adam update from a row whose t is already large (bias corrections
// cached, constant, or computed past the cache when beta2 is near 1)
// matches the float64 formula.
TEST(RowOptimizerTest, AdamBiasCorrectionAtAnyStep) {
  for (float beta2 : {0.999f, 0.99999f}) {
    RowOptimizerOptions o = Opts(K::kAdam, 0.01f);
    o.beta2 = beta2;
    std::unique_ptr<RowOptimizer> opt = MustCreate(o);
    for (float t0 : {0.0f, 4.0f, 20000.0f, 100000.0f, 5e6f, 16777216.0f}) {
      constexpr int kDim = 5;
      TestRng rng(static_cast<uint64_t>(t0) + 3);
      std::vector<float> row(kDim), state(2 * kDim + 1), grad(kDim);
      for (float& x : row) x = rng.Bell(0.2);
      for (int i = 0; i < kDim; ++i) {
        state[i] = rng.Bell(0.01);
        state[kDim + i] = 1e-4f * static_cast<float>(rng.Uniform());
        grad[i] = rng.Bell(0.05);
      }
      state[2 * kDim] = t0;
      const double t = std::min(t0 + 1.0, 16777216.0);
      const double b1 = 0.9, b2 = beta2;
      std::vector<double> want(kDim);
      for (int i = 0; i < kDim; ++i) {
        const double m = b1 * state[i] + (1 - b1) * grad[i];
        const double v = b2 * state[kDim + i] + (1 - b2) * grad[i] * grad[i];
        want[i] = row[i] - 0.01 * (m / (1 - std::pow(b1, t))) /
                               (std::sqrt(v / (1 - std::pow(b2, t))) + 1e-8);
      }
      const std::vector<float> before = row;
      opt->Update(row.data(), state.data(), grad.data(), kDim);
      for (int i = 0; i < kDim; ++i) {
        // Float rounding of the weight and of a step of about lr.
        EXPECT_NEAR(row[i], want[i], 1e-6 * (std::fabs(before[i]) + 0.01))
            << "beta2 " << beta2 << " t0 " << t0 << " i " << i;
      }
    }
  }
}

// A loop holding one ScopedFlushDenormals and calling UpdateInFlushScope
// computes bit for bit what Update does row by row.
TEST(RowOptimizerTest, UpdateInFlushScopeMatchesUpdate) {
  for (K kind : {K::kSgd, K::kAdagrad, K::kFtrl, K::kAdam}) {
    std::unique_ptr<RowOptimizer> opt = MustCreate(Opts(kind, 0.05f));
    constexpr int kDim = 16;
    TestRng rng(5);
    std::vector<float> a(kDim), grad(kDim);
    for (float& x : a) x = rng.Bell(0.2);
    std::vector<float> b = a;
    std::vector<float> sa(opt->StateFloatsPerRow(kDim), 0.0f), sb = sa;
    for (int step = 0; step < 10; ++step) {
      for (float& x : grad) x = rng.Bell(0.05);
      opt->Update(a.data(), sa.data(), grad.data(), kDim);
      ScopedFlushDenormals flush;
      opt->UpdateInFlushScope(b.data(), sb.data(), grad.data(), kDim);
    }
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), kDim * sizeof(float)))
        << RowOptimizerKindName(kind);
    EXPECT_EQ(0, std::memcmp(sa.data(), sb.data(), sa.size() * sizeof(float)))
        << RowOptimizerKindName(kind);
  }
}

#if defined(__SSE__)
// Update flushes a decaying moment that goes subnormal to 0, and restores
// the caller's floating-point mode.
TEST(RowOptimizerTest, UpdateFlushesSubnormalState) {
  RowOptimizerOptions o = Opts(K::kAdam, 0.01f);
  o.beta1 = 0.5f;
  std::unique_ptr<RowOptimizer> opt = MustCreate(o);
  std::vector<float> row = {1.0f, 1.0f};
  std::vector<float> state = {1.5e-38f, 1.0f, 0.0f, 0.0f, 3.0f};
  const std::vector<float> grad = {0.0f, 0.0f};
  opt->Update(row.data(), state.data(), grad.data(), 2);
  EXPECT_EQ(state[0], 0.0f);
  EXPECT_EQ(state[1], 0.5f);
  volatile float tiny = 1.5e-38f;
  EXPECT_EQ(tiny * 0.5f, 0.75e-38f);
}
#endif

}  // namespace
}  // namespace ps
