#include "core/zipf.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

// A std engine as a ZipfSampler generator.
struct MtUniform {
  explicit MtUniform(uint64_t seed) : engine(seed) {}
  double Uniform() { return std::uniform_real_distribution<double>()(engine); }
  std::mt19937_64 engine;
};

TEST(ZipfSamplerTest, MatchesThePmf) {
  constexpr uint64_t kN = 10;
  constexpr double kS = 1.1;
  constexpr int kDraws = 200000;
  ZipfSampler zipf(kN, kS);
  MtUniform rng(3);
  std::vector<int> counts(kN + 1, 0);
  for (int i = 0; i < kDraws; ++i) {
    const uint64_t k = zipf.Sample(&rng);
    ASSERT_GE(k, 1u);
    ASSERT_LE(k, kN);
    ++counts[k];
  }
  double norm = 0;
  for (uint64_t k = 1; k <= kN; ++k) norm += std::pow(k, -kS);
  for (uint64_t k = 1; k <= kN; ++k) {
    const double p = std::pow(k, -kS) / norm;
    const double sd = std::sqrt(kDraws * p * (1 - p));
    EXPECT_NEAR(counts[k], kDraws * p, 5 * sd) << "rank " << k;
  }
}

TEST(ZipfSamplerTest, EdgeSizes) {
  MtUniform rng(4);
  ZipfSampler one(1, 1.05);
  ZipfSampler huge(uint64_t{1} << 40, 1.2);
  ZipfSampler harmonic(1000, 1.0);  // s = 1 goes through the series limits
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(one.Sample(&rng), 1u);
    const uint64_t k = huge.Sample(&rng);
    EXPECT_TRUE(k >= 1 && k <= (uint64_t{1} << 40)) << k;
    const uint64_t h = harmonic.Sample(&rng);
    EXPECT_TRUE(h >= 1 && h <= 1000) << h;
  }
}

}  // namespace
}  // namespace ps
