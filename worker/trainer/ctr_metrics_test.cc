#include "worker/trainer/ctr_metrics.h"

#include <cmath>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/internal/rng.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

struct AucCase {
  const char* name;
  std::vector<double> scores;
  std::vector<float> labels;
  double want;  // computed by hand: correct pairs (+ half the ties) / pairs
};

TEST(CtrMetricsTest, AucTable) {
  const AucCase cases[] = {
      // pos {0.35, 0.8} vs neg {0.1, 0.4}: 0.35 beats 1, 0.8 beats 2 -> 3/4.
      {"sklearn", {0.1, 0.4, 0.35, 0.8}, {0, 0, 1, 1}, 0.75},
      {"perfect", {0.1, 0.2, 0.8, 0.9}, {0, 0, 1, 1}, 1.0},
      {"inverted", {0.9, 0.8, 0.2, 0.1}, {0, 0, 1, 1}, 0.0},
      {"all tied", {0.5, 0.5, 0.5, 0.5}, {0, 1, 0, 1}, 0.5},
      // pos {0.5, 0.9} vs neg {0.2, 0.5}: 1 + 0.5 (tie) + 2 -> 3.5/4.
      {"one tie", {0.2, 0.5, 0.5, 0.9}, {0, 1, 0, 1}, 0.875},
      // pos {0.3, 0.3, 0.7} vs neg {0.3, 0.1}: 1.5 + 1.5 + 2 -> 5/6.
      {"tied positives", {0.3, 0.3, 0.7, 0.3, 0.1}, {1, 1, 1, 0, 0}, 5.0 / 6},
      // One positive ranked 2nd of 4 negatives at 0.2 (ties at 0.2): beats
      // 0.1, ties 0.2 twice, loses to 0.9 -> (1 + 0.5 + 0.5) / 4.
      {"average rank", {0.2, 0.1, 0.2, 0.2, 0.9}, {1, 0, 0, 0, 0}, 0.5},
  };
  for (const AucCase& c : cases) {
    absl::StatusOr<double> auc = ExactAuc(c.scores, c.labels);
    ASSERT_TRUE(auc.ok()) << c.name << ": " << auc.status();
    EXPECT_DOUBLE_EQ(*auc, c.want) << c.name;
    CtrMetricsAccumulator acc;
    for (size_t i = 0; i < c.scores.size(); ++i) {
      ASSERT_TRUE(acc.Add(c.scores[i], c.labels[i]).ok()) << c.name;
    }
    absl::StatusOr<double> acc_auc = acc.Auc();
    ASSERT_TRUE(acc_auc.ok()) << c.name;
    EXPECT_DOUBLE_EQ(*acc_auc, c.want) << c.name;
  }
}

struct LossCase {
  const char* name;
  std::vector<double> probs;
  std::vector<float> labels;
  double want;
};

TEST(CtrMetricsTest, LogLossTable) {
  const double clamped = -std::log(kDefaultLoglossEpsilon);  // 16.1181
  const LossCase cases[] = {
      // -(log 0.8 + log 0.7) / 2.
      {"two",
       {0.8, 0.3},
       {1, 0},
       (0.22314355131420976 + 0.35667494393873245) / 2},
      {"half", {0.5}, {1}, 0.69314718055994531},
      {"confident miss, clamped", {0.0, 1.0}, {1, 0}, clamped},
      {"certain hit", {1.0}, {1}, -std::log1p(-kDefaultLoglossEpsilon)},
  };
  for (const LossCase& c : cases) {
    CtrMetricsAccumulator acc;
    for (size_t i = 0; i < c.probs.size(); ++i) {
      ASSERT_TRUE(acc.Add(c.probs[i], c.labels[i]).ok()) << c.name;
    }
    absl::StatusOr<double> loss = acc.LogLoss();
    ASSERT_TRUE(loss.ok()) << c.name;
    // 1e-8: 1 - (1 - eps) is eps only to double rounding.
    EXPECT_NEAR(*loss, c.want, 1e-8) << c.name;
  }
}

TEST(CtrMetricsTest, EpsilonIsValidated) {
  EXPECT_EQ(CtrMetricsAccumulator::WithEpsilon(0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CtrMetricsAccumulator::WithEpsilon(0.5).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<CtrMetricsAccumulator> acc =
      CtrMetricsAccumulator::WithEpsilon(0.01);
  ASSERT_TRUE(acc.ok());
  ASSERT_TRUE(acc->Add(0.0, 1).ok());
  EXPECT_NEAR(*acc->LogLoss(), -std::log(0.01), 1e-12);
}

// The merged parts give the AUC of the whole set, equal to an O(n^2) count.
TEST(CtrMetricsTest, MergedPartsMatchBruteForce) {
  Rng rng(7);
  constexpr int kN = 600;
  std::vector<double> p(kN);
  std::vector<float> y(kN);
  CtrMetricsAccumulator whole;
  CtrMetricsAccumulator parts[3];
  for (int i = 0; i < kN; ++i) {
    p[i] = static_cast<double>(rng.UniformInt(20)) / 20;  // many ties
    y[i] = rng.Uniform() < p[i] * 0.8 + 0.1 ? 1.0f : 0.0f;
    ASSERT_TRUE(whole.Add(p[i], y[i]).ok());
    ASSERT_TRUE(parts[i % 3].Add(p[i], y[i]).ok());
  }
  double twice = 0;
  double pairs = 0;
  for (int i = 0; i < kN; ++i) {
    for (int j = 0; j < kN; ++j) {
      if (y[i] != 1.0f || y[j] != 0.0f) continue;
      pairs += 1;
      twice += p[i] > p[j] ? 2 : (p[i] == p[j] ? 1 : 0);
    }
  }
  CtrMetricsAccumulator merged;
  for (const CtrMetricsAccumulator& part : parts) merged.Merge(part);
  EXPECT_EQ(merged.examples(), static_cast<uint64_t>(kN));
  EXPECT_EQ(merged.positives(), whole.positives());
  EXPECT_DOUBLE_EQ(*merged.Auc(), twice / (2 * pairs));
  EXPECT_DOUBLE_EQ(*whole.Auc(), twice / (2 * pairs));
  EXPECT_NEAR(*merged.LogLoss(), *whole.LogLoss(), 1e-12);
  const CtrMetrics m = merged.Summary();
  EXPECT_EQ(m.examples, static_cast<uint64_t>(kN));
  EXPECT_DOUBLE_EQ(m.auc, twice / (2 * pairs));
}

TEST(CtrMetricsTest, OneClassIsUndefined) {
  CtrMetricsAccumulator acc;
  EXPECT_EQ(acc.LogLoss().status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(std::isnan(acc.Summary().logloss));
  ASSERT_TRUE(acc.Add(0.7, 1).ok());
  ASSERT_TRUE(acc.Add(0.2, 1).ok());
  const absl::StatusOr<double> auc = acc.Auc();
  EXPECT_EQ(auc.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(auc.status().message(), HasSubstr("0 negatives"));
  const CtrMetrics m = acc.Summary();
  EXPECT_TRUE(std::isnan(m.auc));
  EXPECT_FALSE(std::isnan(m.logloss));
  EXPECT_DOUBLE_EQ(m.positive_rate(), 1.0);
  acc.Clear();
  EXPECT_EQ(acc.examples(), 0u);
}

TEST(CtrMetricsTest, BadInputIsRejectedAndNotAdded) {
  struct Case {
    double p;
    float y;
    const char* want;
  };
  const Case cases[] = {{std::nan(""), 1, "probability"},
                        {1.5, 1, "probability"},
                        {-0.1, 0, "probability"},
                        {0.5, 0.5f, "label"},
                        {0.5, 2, "label"}};
  CtrMetricsAccumulator acc;
  for (const Case& c : cases) {
    const absl::Status s = acc.Add(c.p, c.y);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.want;
    EXPECT_THAT(s.message(), HasSubstr(c.want));
  }
  EXPECT_EQ(acc.examples(), 0u);
  EXPECT_EQ(ExactAuc({0.1, 0.2}, {1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ExactAuc({0.1, std::nan("")}, {1, 0}).status().message(),
              HasSubstr("scores[1]"));
  EXPECT_THAT(ExactAuc({0.1, 0.2}, {1, 3}).status().message(),
              HasSubstr("labels[1]"));
}

}  // namespace
}  // namespace ps
