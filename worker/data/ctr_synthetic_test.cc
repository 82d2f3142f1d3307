#include "worker/data/ctr_synthetic.h"

#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/internal/permutation.h"
#include "worker/data/internal/rng.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// A quick configuration: the bias is solved on fewer examples.
CtrSyntheticConfig SmallConfig() {
  CtrSyntheticConfig c;
  c.calibration_examples = 4096;
  return c;
}

CtrSyntheticGenerator MakeGenerator(const CtrSyntheticConfig& c) {
  absl::StatusOr<CtrSyntheticGenerator> gen = CtrSyntheticGenerator::Create(c);
  EXPECT_TRUE(gen.ok()) << gen.status();
  return *std::move(gen);
}

bool SameExample(const CtrExample& a, const CtrExample& b) {
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

TEST(KeyedPermutationTest, IsABijectionWithInverse) {
  for (uint64_t n : {1, 2, 3, 4, 5, 10, 583, 1000, 4097}) {
    KeyedPermutation perm(n, 0xabc + n);
    std::set<uint64_t> seen;
    for (uint64_t x = 0; x < n; ++x) {
      const uint64_t y = perm.Forward(x);
      ASSERT_LT(y, n) << "n=" << n;
      seen.insert(y);
      ASSERT_EQ(perm.Inverse(y), x) << "n=" << n;
    }
    EXPECT_EQ(seen.size(), n);
  }
  // Hot ranks are scattered: the first 8 ranks of a large field do not land
  // on 0..7 (a fixed key, so the check is deterministic).
  KeyedPermutation big(10131227, 12345);
  int small = 0;
  for (uint64_t x = 0; x < 8; ++x) small += big.Forward(x) < 8;
  EXPECT_EQ(small, 0);
}

TEST(CtrSyntheticTest, ExamplesArePureFunctionsOfSeedAndIndex) {
  const CtrSyntheticGenerator a = MakeGenerator(SmallConfig());
  const CtrSyntheticGenerator b = MakeGenerator(SmallConfig());
  CtrBatch batch;
  std::vector<double> probs(64);
  a.GenerateBatch(1000, 64, &batch, probs.data());
  // Any order, any instance: the same example.
  for (int i = 63; i >= 0; --i) {
    CtrExample e;
    double p;
    b.Generate(1000 + i, &e, &p);
    EXPECT_TRUE(SameExample(e, batch.Get(i))) << i;
    EXPECT_EQ(p, probs[i]);
  }
  CtrSyntheticConfig other = SmallConfig();
  other.seed = 2;
  const CtrSyntheticGenerator c = MakeGenerator(other);
  CtrExample e0, e1;
  a.Generate(5, &e0);
  c.Generate(5, &e1);
  EXPECT_FALSE(SameExample(e0, e1));
  a.Generate(6, &e1);
  EXPECT_FALSE(SameExample(e0, e1));
}

TEST(CtrSyntheticTest, FeaturesKeepTheContract) {
  CtrSyntheticConfig c = SmallConfig();
  c.cardinalities[0] = 1;
  c.cardinalities[1] = 7;
  const CtrSyntheticGenerator gen = MakeGenerator(c);
  int missing_dense = 0;
  std::set<uint64_t> field1;
  for (uint64_t i = 0; i < 2000; ++i) {
    CtrExample e;
    gen.Generate(kCtrTestBegin + i, &e);
    ASSERT_TRUE(CheckCtrExample(e).ok()) << CheckCtrExample(e);
    for (int f = 0; f < kCtrCategoricalFields; ++f) {
      ASSERT_LT(CtrIdValue(e.ids[f]), c.cardinalities[f]) << "field " << f;
    }
    for (float d : e.dense) {
      ASSERT_GE(d, 0.0f);
      missing_dense += d == 0.0f;
    }
    EXPECT_EQ(e.ids[0], CtrId(0, 0));
    field1.insert(e.ids[1]);
  }
  EXPECT_EQ(field1.size(), 7u);
  EXPECT_GT(missing_dense, 0);
}

// The default config: about 25% positives, and the teacher's probability
// separates the classes (a broken teacher would not).
TEST(CtrSyntheticTest, PositiveRateAndTeacherSignal) {
  const CtrSyntheticGenerator gen = MakeGenerator(CtrSyntheticConfig{});
  constexpr int kN = 20000;
  double positives = 0, mean_p = 0, p_pos = 0, p_neg = 0;
  for (uint64_t i = 0; i < kN; ++i) {
    CtrExample e;
    double p;
    gen.Generate(kCtrTestBegin + i, &e, &p);
    positives += e.label;
    mean_p += p;
    (e.label == 1.0f ? p_pos : p_neg) += p;
  }
  // sd of the rate is sqrt(0.25 * 0.75 / 20000) = 0.003.
  EXPECT_NEAR(positives / kN, 0.25, 0.015);
  EXPECT_NEAR(mean_p / kN, 0.25, 0.01);
  EXPECT_GT(p_pos / positives - p_neg / (kN - positives), 0.15);
}

TEST(CtrSyntheticTest, TeacherLogitMatchesGenerate) {
  const CtrSyntheticGenerator gen = MakeGenerator(SmallConfig());
  std::array<bool, kCtrCategoricalFields> none{};
  for (uint64_t i = 0; i < 200; ++i) {
    CtrExample e;
    double p;
    gen.Generate(i, &e, &p);
    absl::StatusOr<double> logit = gen.TeacherLogit(e);
    ASSERT_TRUE(logit.ok()) << logit.status();
    EXPECT_NEAR(1.0 / (1.0 + std::exp(-*logit)), p, 1e-12);
    // Without any id, only the bias and the dense terms remain: the same
    // for two examples with equal dense features.
    CtrExample other;
    gen.Generate(i + 1, &other);
    std::memcpy(other.dense, e.dense, sizeof(e.dense));
    EXPECT_EQ(*gen.TeacherLogit(e, &none), *gen.TeacherLogit(other, &none));
  }
  CtrExample e;
  gen.Generate(0, &e);
  e.ids[3] = CtrId(4, 0);
  EXPECT_THAT(gen.TeacherLogit(e).status().message(), HasSubstr("ids[3]"));
  gen.Generate(0, &e);
  e.ids[8] = CtrId(8, 3);  // field 8 has 3 values: 0..2
  EXPECT_THAT(gen.TeacherLogit(e).status().message(), HasSubstr("ids[8]"));
}

TEST(CtrSyntheticTest, ConfigIsValidated) {
  struct Case {
    const char* want;
    void (*spoil)(CtrSyntheticConfig*);
  };
  const Case cases[] = {
      {"cardinalities[4]",
       [](CtrSyntheticConfig* c) { c->cardinalities[4] = 0; }},
      {"cardinalities[2]",
       [](CtrSyntheticConfig* c) { c->cardinalities[2] = uint64_t{1} << 32; }},
      {"zipf_exponent", [](CtrSyntheticConfig* c) { c->zipf_exponent = 0; }},
      {"zipf_exponent",
       [](CtrSyntheticConfig* c) { c->zipf_exponent = std::nan(""); }},
      {"weight_stddev", [](CtrSyntheticConfig* c) { c->weight_stddev = -1; }},
      {"rank_scale", [](CtrSyntheticConfig* c) { c->rank_scale = 0; }},
      {"dense_weight_stddev",
       [](CtrSyntheticConfig* c) { c->dense_weight_stddev = INFINITY; }},
      {"interaction_pairs",
       [](CtrSyntheticConfig* c) { c->interaction_pairs = 326; }},
      {"interaction_dim",
       [](CtrSyntheticConfig* c) { c->interaction_dim = 17; }},
      {"interaction_stddev",
       [](CtrSyntheticConfig* c) { c->interaction_stddev = -0.1; }},
      {"positive_rate", [](CtrSyntheticConfig* c) { c->positive_rate = 1; }},
      {"calibration_examples",
       [](CtrSyntheticConfig* c) { c->calibration_examples = 10; }},
  };
  for (const Case& c : cases) {
    CtrSyntheticConfig config = SmallConfig();
    c.spoil(&config);
    const absl::Status s = CtrSyntheticGenerator::Create(config).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.want;
    EXPECT_THAT(s.message(), HasSubstr(c.want));
  }
}

TEST(CtrSyntheticTest, InteractionPairsAreDistinct) {
  CtrSyntheticConfig c = SmallConfig();
  c.interaction_pairs = 325;  // every pair
  const CtrSyntheticGenerator gen = MakeGenerator(c);
  std::set<std::pair<int, int>> pairs(gen.interaction_pairs().begin(),
                                      gen.interaction_pairs().end());
  EXPECT_EQ(pairs.size(), 325u);
  for (const auto& [a, b] : pairs) EXPECT_LT(a, b);
}

}  // namespace
}  // namespace ps
