#include "server/optimizer.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/testing/test_rng.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// Float64 reference of each update rule, written straight from the
// PyTorch documentation rather than from optimizer.cc.
struct Reference {
  OptimizerSpec spec;  // defaults filled
  std::vector<double> p, s0, s1;
  uint64_t t = 0;

  void Step(const std::vector<float>& grad, double scale) {
    ++t;
    const double lr = spec.learning_rate(), wd = spec.weight_decay();
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grad[i] * scale;
      switch (spec.kind()) {
        case SGD: {
          g += wd * p[i];
          const double mu = spec.momentum();
          if (mu > 0) {
            s0[i] = t == 1 ? g : mu * s0[i] + g;
            g = spec.nesterov() ? g + mu * s0[i] : s0[i];
          }
          p[i] -= lr * g;
          break;
        }
        case ADAGRAD:
          g += wd * p[i];
          s0[i] += g * g;
          p[i] -= lr * g / (std::sqrt(s0[i]) + spec.epsilon());
          break;
        case ADAM:
        case ADAMW: {
          if (spec.kind() == ADAMW) {
            p[i] *= 1 - lr * wd;
          } else {
            g += wd * p[i];
          }
          const double b1 = spec.beta1(), b2 = spec.beta2();
          s0[i] = b1 * s0[i] + (1 - b1) * g;
          s1[i] = b2 * s1[i] + (1 - b2) * g * g;
          const double mhat = s0[i] / (1 - std::pow(b1, t));
          const double vhat = s1[i] / (1 - std::pow(b2, t));
          p[i] -= lr * mhat / (std::sqrt(vhat) + spec.epsilon());
          break;
        }
        default:
          ADD_FAILURE() << "unexpected kind";
      }
    }
  }
};

OptimizerSpec MakeSpec(OptimizerKind kind, float lr) {
  OptimizerSpec s;
  s.set_kind(kind);
  s.set_learning_rate(lr);
  return s;
}

struct RefCase {
  std::string name;
  OptimizerSpec spec;
  double grad_scale;
};

std::vector<RefCase> RefCases() {
  std::vector<RefCase> cases;
  cases.push_back({"sgd", MakeSpec(SGD, 0.05f), 1.0});
  {
    OptimizerSpec s = MakeSpec(SGD, 0.05f);
    s.set_momentum(0.9f);
    cases.push_back({"sgd_momentum", s, 1.0});
    s.set_weight_decay(1e-2f);
    cases.push_back({"sgd_momentum_wd_mean_of_3", s, 1.0 / 3});
    s.set_nesterov(true);
    cases.push_back({"sgd_nesterov_wd", s, 1.0});
  }
  cases.push_back({"adagrad", MakeSpec(ADAGRAD, 0.01f), 1.0});
  {
    OptimizerSpec s = MakeSpec(ADAGRAD, 0.01f);
    s.set_initial_accumulator(0.1f);
    s.set_weight_decay(1e-3f);
    s.set_epsilon(1e-7f);
    cases.push_back({"adagrad_acc_wd_eps", s, 0.25});
  }
  cases.push_back({"adam", MakeSpec(ADAM, 1e-3f), 1.0});
  {
    OptimizerSpec s = MakeSpec(ADAM, 1e-3f);
    s.set_beta1(0.8f);
    s.set_beta2(0.99f);
    s.set_epsilon(1e-6f);
    s.set_weight_decay(1e-2f);
    cases.push_back({"adam_betas_wd", s, 0.5});
  }
  {
    OptimizerSpec s = MakeSpec(ADAMW, 1e-3f);
    s.set_weight_decay(0.1f);
    cases.push_back({"adamw", s, 1.0});
  }
  return cases;
}

class ReferenceTest : public ::testing::TestWithParam<RefCase> {};

// 100 steps of every optimizer on seeded data track a float64 reference: the
// relative error ||p - ref|| / ||ref|| stays under 1e-6 at every step.
TEST_P(ReferenceTest, MatchesFloat64ReferenceFor100Steps) {
  const RefCase& c = GetParam();
  absl::StatusOr<std::unique_ptr<Optimizer>> opt = Optimizer::Create(c.spec);
  ASSERT_TRUE(opt.ok()) << opt.status();
  constexpr size_t kN = 4099;  // odd: covers the vector loops' tails
  TestRng rng(42);
  std::vector<float> params(kN);
  for (float& x : params) x = rng.Bell(0.2);
  Reference ref{(*opt)->spec(), {params.begin(), params.end()}, {}, {}};
  const double init_acc =
      c.spec.kind() == ADAGRAD ? c.spec.initial_accumulator() : 0;
  ref.s0.assign(kN, init_acc);
  ref.s1.assign(kN, 0);
  OptimizerState state = (*opt)->NewState(kN);
  std::vector<float> grad(kN);
  double worst = 0;
  for (int step = 0; step < 100; ++step) {
    for (size_t i = 0; i < kN; ++i) {
      // A weak pull toward 0 plus minibatch noise: parameters keep their
      // magnitude, so the relative error measures rounding, not shrinkage.
      grad[i] = 0.05f * params[i] + rng.Bell(0.05);
    }
    (*opt)->Apply(absl::MakeSpan(params), grad.data(),
                  static_cast<float>(c.grad_scale), &state);
    ref.Step(grad, static_cast<float>(c.grad_scale));
    double diff2 = 0, ref2 = 0;
    for (size_t i = 0; i < kN; ++i) {
      const double d = params[i] - ref.p[i];
      diff2 += d * d;
      ref2 += ref.p[i] * ref.p[i];
    }
    const double rel = std::sqrt(diff2 / ref2);
    worst = std::max(worst, rel);
    ASSERT_LE(rel, 1e-6) << c.name << " step " << step;
  }
  std::printf("%s: worst relative error %.3g\n", c.name.c_str(), worst);
  EXPECT_EQ(state.steps, 100u);
  RecordProperty("worst_relative_error", absl::StrCat(worst));
}

INSTANTIATE_TEST_SUITE_P(AllKinds, ReferenceTest,
                         ::testing::ValuesIn(RefCases()),
                         [](const auto& info) { return info.param.name; });

#if defined(__SSE__)
// Subnormal results are kept outside the scope and flushed to zero inside
// it; normal values are untouched; the mode is restored after.
TEST(OptimizerTest, ScopedFlushDenormalsFlushesOnlySubnormals) {
  volatile float tiny = 1.5e-38f;  // normal; half of it is subnormal
  EXPECT_EQ(tiny * 0.5f, 0.75e-38f);
  {
    ScopedFlushDenormals scope;
    EXPECT_EQ(tiny * 0.5f, 0.0f);
    EXPECT_EQ(tiny * 2.0f, 3.0e-38f);
  }
  EXPECT_GT(tiny * 0.5f, 0.0f);
}

// Apply runs under the scope: a momentum buffer decaying below FLT_MIN
// becomes zero, a normal one decays exactly, and the caller's mode stays.
TEST(OptimizerTest, ApplyFlushesSubnormalState) {
  OptimizerSpec spec = MakeSpec(SGD, 1.0f);
  spec.set_momentum(0.5f);
  auto sgd = Optimizer::Create(spec);
  ASSERT_TRUE(sgd.ok()) << sgd.status();
  const float zero_grad[2] = {0.0f, 0.0f};
  std::vector<float> p = {1.0f, 1.0f};
  OptimizerState state = (*sgd)->NewState(2);
  state.slots[0] = {1.5e-38f, 1.0f};
  (*sgd)->Apply(absl::MakeSpan(p), zero_grad, 1.0f, &state);
  EXPECT_EQ(state.slots[0][0], 0.0f);
  EXPECT_EQ(state.slots[0][1], 0.5f);
  volatile float tiny = 1.5e-38f;
  EXPECT_EQ(tiny * 0.5f, 0.75e-38f);
}
#endif

TEST(OptimizerTest, FillsDefaults) {
  auto adam = Optimizer::Create(MakeSpec(ADAM, 1e-3f));
  ASSERT_TRUE(adam.ok());
  EXPECT_FLOAT_EQ((*adam)->spec().beta1(), 0.9f);
  EXPECT_FLOAT_EQ((*adam)->spec().beta2(), 0.999f);
  EXPECT_FLOAT_EQ((*adam)->spec().epsilon(), 1e-8f);
  EXPECT_EQ((*adam)->num_slots(), 2);
  auto adagrad = Optimizer::Create(MakeSpec(ADAGRAD, 1e-3f));
  ASSERT_TRUE(adagrad.ok());
  EXPECT_FLOAT_EQ((*adagrad)->spec().epsilon(), 1e-10f);
  EXPECT_EQ((*adagrad)->num_slots(), 1);
  auto sgd = Optimizer::Create(MakeSpec(SGD, 1e-3f));
  ASSERT_TRUE(sgd.ok());
  EXPECT_EQ((*sgd)->num_slots(), 0);
  EXPECT_FALSE((*sgd)->spec().has_epsilon());
}

TEST(OptimizerTest, AdagradStartsFromInitialAccumulator) {
  OptimizerSpec s = MakeSpec(ADAGRAD, 1e-3f);
  s.set_initial_accumulator(0.5f);
  auto opt = Optimizer::Create(s);
  ASSERT_TRUE(opt.ok());
  OptimizerState state = (*opt)->NewState(3);
  ASSERT_EQ(state.slots.size(), 1u);
  EXPECT_THAT(state.slots[0], ::testing::Each(0.5f));
}

struct BadSpecCase {
  std::string name;
  OptimizerSpec spec;
  std::string want;  // substring of the error
};

std::vector<BadSpecCase> BadSpecCases() {
  std::vector<BadSpecCase> cases;
  auto with = [](OptimizerKind kind, auto mutate) {
    OptimizerSpec s = MakeSpec(kind, 0.1f);
    mutate(&s);
    return s;
  };
  cases.push_back({"no_kind", with(OPTIMIZER_UNSPECIFIED, [](auto*) {}),
                   "optimizer.kind: must be SGD, ADAGRAD, ADAM or ADAMW"});
  cases.push_back({"zero_lr",
                   with(SGD, [](auto* s) { s->set_learning_rate(0); }),
                   "optimizer.learning_rate: must be > 0"});
  cases.push_back({"negative_lr",
                   with(ADAM, [](auto* s) { s->set_learning_rate(-1); }),
                   "optimizer.learning_rate: must be > 0, got -1"});
  cases.push_back({"nan_lr",
                   with(ADAM, [](auto* s) { s->set_learning_rate(NAN); }),
                   "optimizer.learning_rate"});
  cases.push_back({"momentum_one",
                   with(SGD, [](auto* s) { s->set_momentum(1); }),
                   "optimizer.momentum: must be in [0, 1)"});
  cases.push_back({"nesterov_without_momentum",
                   with(SGD, [](auto* s) { s->set_nesterov(true); }),
                   "optimizer.nesterov: needs momentum > 0"});
  cases.push_back({"negative_wd",
                   with(SGD, [](auto* s) { s->set_weight_decay(-0.1f); }),
                   "optimizer.weight_decay: must be >= 0"});
  cases.push_back({"beta1_one", with(ADAM, [](auto* s) { s->set_beta1(1); }),
                   "optimizer.beta1: must be in [0, 1)"});
  cases.push_back({"beta2_negative",
                   with(ADAMW, [](auto* s) { s->set_beta2(-0.5f); }),
                   "optimizer.beta2: must be in [0, 1)"});
  cases.push_back({"zero_epsilon",
                   with(ADAGRAD, [](auto* s) { s->set_epsilon(0); }),
                   "optimizer.epsilon: must be > 0"});
  cases.push_back(
      {"negative_accumulator",
       with(ADAGRAD, [](auto* s) { s->set_initial_accumulator(-1); }),
       "optimizer.initial_accumulator: must be >= 0"});
  cases.push_back({"momentum_on_adam",
                   with(ADAM, [](auto* s) { s->set_momentum(0.9f); }),
                   "optimizer.momentum: only SGD"});
  cases.push_back({"beta1_on_sgd",
                   with(SGD, [](auto* s) { s->set_beta1(0.9f); }),
                   "optimizer.beta1: only ADAM and ADAMW"});
  cases.push_back({"epsilon_on_sgd",
                   with(SGD, [](auto* s) { s->set_epsilon(1e-8f); }),
                   "optimizer.epsilon: SGD has no epsilon"});
  cases.push_back({"accumulator_on_adam",
                   with(ADAM, [](auto* s) { s->set_initial_accumulator(1); }),
                   "optimizer.initial_accumulator: only ADAGRAD"});
  cases.push_back({"adamw_decay_too_large",
                   with(ADAMW, [](auto* s) { s->set_weight_decay(20); }),
                   "optimizer.weight_decay: learning_rate * weight_decay"});
  return cases;
}

class BadSpecTest : public ::testing::TestWithParam<BadSpecCase> {};

TEST_P(BadSpecTest, RejectedNamingTheField) {
  auto opt = Optimizer::Create(GetParam().spec);
  ASSERT_FALSE(opt.ok());
  EXPECT_EQ(opt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(opt.status().message()), HasSubstr(GetParam().want));
}

INSTANTIATE_TEST_SUITE_P(All, BadSpecTest, ::testing::ValuesIn(BadSpecCases()),
                         [](const auto& info) { return info.param.name; });

TEST(OptimizerTest, ExportImportRoundTripContinuesIdentically) {
  auto opt = Optimizer::Create(MakeSpec(ADAM, 1e-2f));
  ASSERT_TRUE(opt.ok());
  constexpr size_t kN = 257;
  TestRng rng(7);
  std::vector<float> params(kN), grad(kN);
  for (float& x : params) x = rng.Bell(1);
  OptimizerState state = (*opt)->NewState(kN);
  for (int step = 0; step < 3; ++step) {
    for (float& g : grad) g = rng.Bell(0.1);
    (*opt)->Apply(absl::MakeSpan(params), grad.data(), 1, &state);
  }
  const std::string bytes = (*opt)->ExportState(state);
  OptimizerState restored;
  ASSERT_TRUE((*opt)->ImportState(bytes, kN, &restored).ok());
  EXPECT_EQ(restored.steps, 3u);
  ASSERT_EQ(restored.slots, state.slots);

  std::vector<float> a = params, b = params;
  for (float& g : grad) g = rng.Bell(0.1);
  (*opt)->Apply(absl::MakeSpan(a), grad.data(), 1, &state);
  (*opt)->Apply(absl::MakeSpan(b), grad.data(), 1, &restored);
  EXPECT_EQ(a, b);
}

TEST(OptimizerTest, ImportRejectsMismatchedOrCorruptState) {
  auto adam = Optimizer::Create(MakeSpec(ADAM, 1e-2f));
  auto adagrad = Optimizer::Create(MakeSpec(ADAGRAD, 1e-2f));
  ASSERT_TRUE(adam.ok() && adagrad.ok());
  const std::string bytes = (*adam)->ExportState((*adam)->NewState(16));
  OptimizerState state = (*adam)->NewState(16);
  state.steps = 5;
  struct Case {
    std::string name;
    const Optimizer* opt;
    std::string bytes;
    size_t length;
    std::string want;
  };
  std::string bad_magic = bytes;
  bad_magic[0] = 'X';
  const std::vector<Case> cases = {
      {"truncated_header", adam->get(), bytes.substr(0, 10), 16, "header"},
      {"truncated_data", adam->get(), bytes.substr(0, bytes.size() - 4), 16,
       "expected"},
      {"bad_magic", adam->get(), bad_magic, 16, "magic"},
      {"other_kind", adagrad->get(), bytes, 16, "kind"},
      {"other_length", adam->get(), bytes, 17, "chunk holds 17"},
  };
  for (const Case& c : cases) {
    absl::Status st = c.opt->ImportState(c.bytes, c.length, &state);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(std::string(st.message()), HasSubstr(c.want)) << c.name;
    EXPECT_EQ(state.steps, 5u) << c.name << ": state changed on failure";
  }
}

}  // namespace
}  // namespace ps
