#include "core/init.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

TensorSpec Tensor(const std::string& name, std::vector<uint64_t> shape,
                  InitKind kind, float scale = 0, float value = 0) {
  TensorSpec t;
  t.set_name(name);
  for (uint64_t d : shape) t.add_shape(d);
  t.mutable_init()->set_kind(kind);
  t.mutable_init()->set_scale(scale);
  t.mutable_init()->set_value(value);
  return t;
}

std::vector<float> Init(uint64_t seed, const TensorSpec& t, uint64_t offset,
                        size_t n) {
  std::vector<float> v(n);
  absl::Status st = InitValues(seed, t, offset, absl::MakeSpan(v));
  EXPECT_TRUE(st.ok()) << st;
  return v;
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

struct Moments {
  double mean, stddev, min, max;
};

Moments MomentsOf(const std::vector<float>& v) {
  double sum = 0, sum2 = 0, lo = v[0], hi = v[0];
  for (float x : v) {
    sum += x;
    sum2 += static_cast<double>(x) * x;
    lo = std::min<double>(lo, x);
    hi = std::max<double>(hi, x);
  }
  const double mean = sum / v.size();
  return {mean, std::sqrt(sum2 / v.size() - mean * mean), lo, hi};
}

TEST(PortableLogTest, MatchesLibmToAFewUlp) {
  uint64_t z = 1;
  for (int i = 0; i < 100000; ++i) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    // Mantissas and exponents over the range the polar method uses, and far
    // beyond it.
    const double x = std::ldexp(1.0 + (z >> 11) * 0x1.0p-53, (i % 200) - 150);
    const double want = std::log(x);
    EXPECT_NEAR(PortableLog(x), want, 4e-16 * std::max(1.0, std::fabs(want)))
        << x;
  }
  EXPECT_EQ(PortableLog(1.0), 0.0);
}

// The values are pinned bit for bit: a change to the generator (which would
// change every job's starting point) must be deliberate. The constants were
// cross-checked against an independent Python transcription of the
// algorithm (splitmix64, FNV-1a, polar method with math.log).
TEST(InitTest, GoldenBits) {
  const TensorSpec u = Tensor("fc1/w", {784, 256}, UNIFORM, 0.5f);
  const TensorSpec n = Tensor("fc1/w", {784, 256}, NORMAL, 1.0f);
  const std::vector<float> uv = Init(42, u, 0, 3);
  const std::vector<float> nv = Init(42, n, 0, 3);
  EXPECT_THAT((std::vector<uint32_t>{Bits(uv[0]), Bits(uv[1]), Bits(uv[2])}),
              ::testing::ElementsAre(0xbc5c1bb6u, 0xbe00db85u, 0xbef232b9u));
  EXPECT_THAT((std::vector<uint32_t>{Bits(nv[0]), Bits(nv[1]), Bits(nv[2])}),
              ::testing::ElementsAre(0xbe7ed615u, 0x3f8915c6u, 0xc02e033au));
}

// A chunk's values depend on the element's position, not on how the tensor
// is cut: any slice equals the same slice of the whole tensor.
TEST(InitTest, ChunkIsASliceOfTheWholeTensor) {
  for (InitKind kind : {UNIFORM, NORMAL, GLOROT_UNIFORM, HE_NORMAL}) {
    const float scale = kind == UNIFORM || kind == NORMAL ? 0.1f : 0.0f;
    const TensorSpec t = Tensor("w", {100, 37}, kind, scale);
    const std::vector<float> whole = Init(7, t, 0, 3700);
    for (uint64_t offset : {0, 1, 999, 3000}) {
      const std::vector<float> part = Init(7, t, offset, 700);
      EXPECT_TRUE(std::equal(part.begin(), part.end(), whole.begin() + offset))
          << InitKind_Name(kind) << " offset " << offset;
    }
  }
}

TEST(InitTest, SeedAndTensorNameChangeTheValues) {
  const TensorSpec a = Tensor("a", {1000}, NORMAL, 1);
  const TensorSpec b = Tensor("b", {1000}, NORMAL, 1);
  const std::vector<float> a1 = Init(1, a, 0, 1000);
  EXPECT_EQ(a1, Init(1, a, 0, 1000));
  int same_seed = 0, same_name = 0;
  const std::vector<float> a2 = Init(2, a, 0, 1000);
  const std::vector<float> b1 = Init(1, b, 0, 1000);
  for (int i = 0; i < 1000; ++i) {
    same_seed += a1[i] == a2[i];
    same_name += a1[i] == b1[i];
  }
  EXPECT_LT(same_seed, 5);
  EXPECT_LT(same_name, 5);
  EXPECT_NE(TensorSeed(1, "a"), TensorSeed(1, "b"));
  EXPECT_NE(TensorSeed(1, "a"), TensorSeed(2, "a"));
}

struct DistCase {
  std::string name;
  TensorSpec tensor;
  double want_stddev;
  double bound;  // |x| <= bound, 0 = unbounded
};

TEST(InitTest, DistributionsHaveTheirMoments) {
  constexpr size_t kN = 200000;
  const std::vector<DistCase> cases = {
      {"uniform", Tensor("u", {kN}, UNIFORM, 0.3f), 0.3 / std::sqrt(3.0), 0.3},
      {"normal", Tensor("n", {kN}, NORMAL, 0.05f), 0.05, 0},
      // fan_in = 400, fan_out = 500: a = sqrt(6 / 900).
      {"glorot_2d", Tensor("g", {400, 500}, GLOROT_UNIFORM),
       std::sqrt(6.0 / 900) / std::sqrt(3.0), std::sqrt(6.0 / 900)},
      // 1-D: fan_in = fan_out = n.
      {"glorot_1d", Tensor("g1", {kN}, GLOROT_UNIFORM),
       std::sqrt(6.0 / (2.0 * kN)) / std::sqrt(3.0),
       std::sqrt(6.0 / (2.0 * kN))},
      {"he_2d", Tensor("h", {400, 500}, HE_NORMAL), std::sqrt(2.0 / 400), 0},
      {"he_1d", Tensor("h1", {kN}, HE_NORMAL), std::sqrt(2.0 / kN), 0},
  };
  for (const DistCase& c : cases) {
    const Moments m = MomentsOf(Init(3, c.tensor, 0, kN));
    EXPECT_NEAR(m.mean, 0, 0.01 * c.want_stddev) << c.name;
    EXPECT_NEAR(m.stddev, c.want_stddev, 0.01 * c.want_stddev) << c.name;
    if (c.bound > 0) {
      EXPECT_GE(m.min, -c.bound * (1 + 1e-6)) << c.name;
      EXPECT_LE(m.max, c.bound * (1 + 1e-6)) << c.name;
      EXPECT_LT(m.min, -0.99 * c.bound) << c.name;
      EXPECT_GT(m.max, 0.99 * c.bound) << c.name;
    } else {
      // 200k normals: the extremes sit near 4.5 sigma.
      EXPECT_GT(m.max, 3.5 * c.want_stddev) << c.name;
      EXPECT_LT(m.max, 6 * c.want_stddev) << c.name;
    }
  }
}

TEST(InitTest, ZerosAndConstant) {
  EXPECT_THAT(Init(1, Tensor("z", {5}, ZEROS), 0, 5), ::testing::Each(0.0f));
  EXPECT_THAT(Init(1, Tensor("z", {5}, INIT_UNSPECIFIED), 0, 5),
              ::testing::Each(0.0f));
  EXPECT_THAT(Init(1, Tensor("c", {5}, CONSTANT, 0, 0.25f), 2, 3),
              ::testing::Each(0.25f));
}

TEST(InitTest, RejectsBadSpecsNamingTheField) {
  struct Case {
    std::string name;
    TensorSpec tensor;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"negative_scale", Tensor("t", {4}, UNIFORM, -1),
       "init.scale: must be >= 0"},
      {"nan_scale", Tensor("t", {4}, NORMAL, NAN), "init.scale: must be >= 0"},
      {"inf_value", Tensor("t", {4}, CONSTANT, 0, INFINITY),
       "init.value: must be finite"},
      {"value_on_normal", Tensor("t", {4}, NORMAL, 1, 2),
       "init.value: NORMAL takes no value"},
      {"scale_on_glorot", Tensor("t", {4, 4}, GLOROT_UNIFORM, 1),
       "init.scale: GLOROT_UNIFORM takes no scale"},
      {"glorot_3d", Tensor("t", {2, 2, 2}, GLOROT_UNIFORM),
       "shape: GLOROT_UNIFORM needs a 1-D or 2-D shape, got 3-D"},
      {"he_zero_dim", Tensor("t", {0, 3}, HE_NORMAL), "shape[0]: must be > 0"},
      {"unknown_kind", Tensor("t", {4}, static_cast<InitKind>(99)),
       "init.kind: unknown kind 99"},
  };
  for (const Case& c : cases) {
    std::vector<float> out(4, 1.0f);
    absl::Status st = InitValues(1, c.tensor, 0, absl::MakeSpan(out));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(std::string(st.message()), HasSubstr(c.want)) << c.name;
  }
}

}  // namespace
}  // namespace ps
