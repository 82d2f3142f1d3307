// Validation of RowOptimizerOptions and of row state from outside (the
// numerics are in row_optimizer_test.cc).
#include <cfloat>
#include <functional>
#include <limits>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/sparse/row_optimizer.h"

namespace ps {
namespace {

using K = RowOptimizerKind;
using ::testing::HasSubstr;
using ::testing::StartsWith;

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

TEST(RowOptimizerTest, StateFloatsPerRow) {
  EXPECT_EQ(MustCreate(Opts(K::kSgd, 0.1f))->StateFloatsPerRow(16), 0);
  EXPECT_EQ(MustCreate(Opts(K::kAdagrad, 0.1f))->StateFloatsPerRow(16), 16);
  EXPECT_EQ(MustCreate(Opts(K::kFtrl, 0.1f))->StateFloatsPerRow(16), 32);
  EXPECT_EQ(MustCreate(Opts(K::kAdam, 0.1f))->StateFloatsPerRow(16), 33);
}

TEST(RowOptimizerTest, FillsDefaults) {
  const RowOptimizerOptions adam = MustCreate(Opts(K::kAdam, 1e-3f))->options();
  EXPECT_EQ(*adam.beta1, 0.9f);
  EXPECT_EQ(*adam.beta2, 0.999f);
  EXPECT_EQ(*adam.epsilon, 1e-8f);
  const RowOptimizerOptions adagrad =
      MustCreate(Opts(K::kAdagrad, 1e-3f))->options();
  EXPECT_EQ(*adagrad.epsilon, 1e-10f);
  const RowOptimizerOptions ftrl = MustCreate(Opts(K::kFtrl, 1e-3f))->options();
  EXPECT_EQ(*ftrl.ftrl_beta, 1.0f);
  EXPECT_FALSE(ftrl.epsilon.has_value());
  EXPECT_FALSE(MustCreate(Opts(K::kSgd, 1e-3f))->options().epsilon);
}

struct BadStateCase {
  std::string name;
  K kind;
  std::function<void(std::vector<float>*)> corrupt;  // dim 3
  std::string message;
};

TEST(RowOptimizerTest, CheckStateNamesTheBadFloat) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<BadStateCase> cases = {
      {"AdagradNegative", K::kAdagrad, [](auto* s) { (*s)[1] = -1.0f; },
       "state[1] (s[1]): must be >= 0"},
      {"AdagradNan", K::kAdagrad, [&](auto* s) { (*s)[2] = nan; },
       "state[2] (s[2]): must be finite"},
      {"FtrlZInf", K::kFtrl, [&](auto* s) { (*s)[0] = -inf; },
       "state[0] (z[0]): must be finite"},
      {"FtrlNegativeS", K::kFtrl, [](auto* s) { (*s)[4] = -0.5f; },
       "state[4] (s[1]): must be >= 0"},
      {"AdamMNan", K::kAdam, [&](auto* s) { (*s)[2] = nan; },
       "state[2] (m[2]): must be finite"},
      {"AdamNegativeV", K::kAdam, [](auto* s) { (*s)[3] = -1.0f; },
       "state[3] (v[0]): must be >= 0"},
      {"AdamFractionalT", K::kAdam, [](auto* s) { (*s)[6] = 2.5f; },
       "state[6] (t[0]): must be an integer in [0, 2^24]"},
      {"AdamNegativeT", K::kAdam, [](auto* s) { (*s)[6] = -1.0f; },
       "state[6] (t[0])"},
      {"AdamHugeT", K::kAdam, [](auto* s) { (*s)[6] = 1e9f; },
       "state[6] (t[0])"},
  };
  for (const BadStateCase& c : cases) {
    std::unique_ptr<RowOptimizer> opt = MustCreate(Opts(c.kind, 0.1f));
    std::vector<float> state(opt->StateFloatsPerRow(3), 0.0f);
    ASSERT_TRUE(opt->CheckState(state.data(), 3).ok()) << c.name;
    c.corrupt(&state);
    const absl::Status s = opt->CheckState(state.data(), 3);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(std::string(s.message()), StartsWith(c.message)) << c.name;
  }
}

struct BadOptionsCase {
  std::string name;
  RowOptimizerOptions options;
  std::string field;  // the message starts with "optimizer.<field>: "
  std::string detail;
};

BadOptionsCase Bad(std::string name, K kind,
                   std::function<void(RowOptimizerOptions*)> edit,
                   std::string field, std::string detail) {
  RowOptimizerOptions o = Opts(kind, 0.1f);
  edit(&o);
  return {std::move(name), o, std::move(field), std::move(detail)};
}

std::vector<BadOptionsCase> BadOptionsCases() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  using O = RowOptimizerOptions;
  return {
      Bad(
          "KindUnspecified", K::kUnspecified, [](O*) {}, "kind",
          "must be SGD, ADAGRAD, FTRL or ADAM, got UNSPECIFIED"),
      Bad(
          "KindUnknown", K::kSgd, [](O* o) { o->kind = static_cast<K>(42); },
          "kind", "got 42"),
      Bad(
          "LrZero", K::kSgd, [](O* o) { o->learning_rate = 0; },
          "learning_rate", "must be > 0 and finite, got 0"),
      Bad(
          "LrNegative", K::kAdagrad, [](O* o) { o->learning_rate = -1; },
          "learning_rate", "got -1"),
      Bad(
          "LrNan", K::kFtrl, [&](O* o) { o->learning_rate = nan; },
          "learning_rate", "got nan"),
      Bad(
          "LrInf", K::kAdam, [&](O* o) { o->learning_rate = inf; },
          "learning_rate", "got inf"),
      Bad(
          "LrSubnormal", K::kSgd, [](O* o) { o->learning_rate = 1e-40f; },
          "learning_rate", "(a normal float)"),
      Bad(
          "WeightDecayNegative", K::kSgd, [](O* o) { o->weight_decay = -1; },
          "weight_decay", "must be >= 0 and finite, got -1"),
      Bad(
          "WeightDecayNan", K::kAdam, [&](O* o) { o->weight_decay = nan; },
          "weight_decay", "got nan"),
      Bad(
          "WeightDecayOnFtrl", K::kFtrl, [](O* o) { o->weight_decay = 0.1f; },
          "weight_decay", "not used by FTRL"),
      Bad(
          "InitialAccumulatorNegative", K::kAdagrad,
          [](O* o) { o->initial_accumulator = -0.1f; }, "initial_accumulator",
          "got -0.1"),
      Bad(
          "InitialAccumulatorInf", K::kFtrl,
          [&](O* o) { o->initial_accumulator = inf; }, "initial_accumulator",
          "got inf"),
      Bad(
          "InitialAccumulatorOnAdam", K::kAdam,
          [](O* o) { o->initial_accumulator = 0.1f; }, "initial_accumulator",
          "not used by ADAM"),
      Bad(
          "EpsilonZero", K::kAdagrad, [](O* o) { o->epsilon = 0.0f; },
          "epsilon", "must be > 0"),
      Bad(
          "EpsilonNegative", K::kAdam, [](O* o) { o->epsilon = -1e-8f; },
          "epsilon", "got -1e-08"),
      Bad(
          "EpsilonNan", K::kAdam, [&](O* o) { o->epsilon = nan; }, "epsilon",
          "got nan"),
      Bad(
          "EpsilonSubnormal", K::kAdagrad, [](O* o) { o->epsilon = 1e-39f; },
          "epsilon", "(a normal float)"),
      Bad(
          "EpsilonOnSgd", K::kSgd, [](O* o) { o->epsilon = 1e-8f; }, "epsilon",
          "not used by SGD"),
      Bad(
          "EpsilonOnFtrl", K::kFtrl, [](O* o) { o->epsilon = 1e-8f; },
          "epsilon", "not used by FTRL"),
      Bad(
          "Beta1One", K::kAdam, [](O* o) { o->beta1 = 1.0f; }, "beta1",
          "must be in [0, 1), got 1"),
      Bad(
          "Beta1Negative", K::kAdam, [](O* o) { o->beta1 = -0.1f; }, "beta1",
          "got -0.1"),
      Bad(
          "Beta2Nan", K::kAdam, [&](O* o) { o->beta2 = nan; }, "beta2",
          "got nan"),
      Bad(
          "Beta2OnAdagrad", K::kAdagrad, [](O* o) { o->beta2 = 0.99f; },
          "beta2", "not used by ADAGRAD"),
      Bad(
          "Beta1OnFtrl", K::kFtrl, [](O* o) { o->beta1 = 0.9f; }, "beta1",
          "not used by FTRL"),
      Bad(
          "FtrlBetaNegative", K::kFtrl, [](O* o) { o->ftrl_beta = -1.0f; },
          "ftrl_beta", "must be >= 0 and finite, got -1"),
      Bad(
          "FtrlBetaOnAdam", K::kAdam, [](O* o) { o->ftrl_beta = 1.0f; },
          "ftrl_beta", "not used by ADAM"),
      Bad(
          "FtrlDividesByZero", K::kFtrl, [](O* o) { o->ftrl_beta = 0.0f; },
          "ftrl_beta",
          "needs ftrl_beta > 0, l2 > 0 or initial_accumulator > 0"),
      Bad(
          "L1Negative", K::kFtrl, [](O* o) { o->l1 = -1.0f; }, "l1", "got -1"),
      Bad(
          "L1Inf", K::kFtrl, [&](O* o) { o->l1 = inf; }, "l1", "got inf"),
      Bad(
          "L1OnAdagrad", K::kAdagrad, [](O* o) { o->l1 = 0.1f; }, "l1",
          "not used by ADAGRAD"),
      Bad(
          "L2Nan", K::kFtrl, [&](O* o) { o->l2 = nan; }, "l2", "got nan"),
      Bad(
          "L2OnSgd", K::kSgd, [](O* o) { o->l2 = 0.1f; }, "l2",
          "not used by SGD"),
  };
}

void PrintTo(const BadOptionsCase& c, std::ostream* os) { *os << c.name; }

class BadOptionsTest : public ::testing::TestWithParam<BadOptionsCase> {};

TEST_P(BadOptionsTest, RejectedNamingTheField) {
  const BadOptionsCase& c = GetParam();
  absl::StatusOr<std::unique_ptr<RowOptimizer>> opt =
      RowOptimizer::Create(c.options);
  ASSERT_FALSE(opt.ok());
  EXPECT_EQ(opt.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(opt.status().message());
  EXPECT_THAT(message, StartsWith(absl::StrCat("optimizer.", c.field, ": ")));
  EXPECT_THAT(message, HasSubstr(c.detail));
}

INSTANTIATE_TEST_SUITE_P(All, BadOptionsTest,
                         ::testing::ValuesIn(BadOptionsCases()),
                         [](const auto& info) { return info.param.name; });

// The boundary values each check lets through.
TEST(RowOptimizerTest, AcceptsBoundaryValues) {
  RowOptimizerOptions o = Opts(K::kFtrl, FLT_MIN * 2);
  o.ftrl_beta = 0.0f;
  o.l2 = 0.5f;  // beta 0 is fine with l2 > 0
  EXPECT_TRUE(RowOptimizer::Create(o).ok());
  o = Opts(K::kFtrl, 0.1f);
  o.ftrl_beta = 0.0f;
  o.initial_accumulator = 0.1f;  // ... or with n starting above 0
  EXPECT_TRUE(RowOptimizer::Create(o).ok());
  o = Opts(K::kAdam, 0.1f);
  o.beta1 = 0.0f;
  o.beta2 = 0.0f;
  o.epsilon = FLT_MIN;
  EXPECT_TRUE(RowOptimizer::Create(o).ok());
}

}  // namespace
}  // namespace ps
