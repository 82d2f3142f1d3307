#include "core/half_float.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

float F(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint32_t B(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

struct Case {
  uint32_t in;   // float32 bits
  uint16_t out;  // expected 16-bit pattern
  const char* what;
};

// Expected patterns worked out by hand from the IEEE layouts.
TEST(HalfFloatTest, Bf16RoundsToNearestEven) {
  const std::vector<Case> cases = {
      {0x3f800000, 0x3f80, "1.0 exact"},
      {0xbf800000, 0xbf80, "-1.0 exact"},
      {0x00000000, 0x0000, "+0"},
      {0x80000000, 0x8000, "-0"},
      {0x3f807fff, 0x3f80, "just below the tie: down"},
      {0x3f808000, 0x3f80, "tie, 0x3f80 even: down"},
      {0x3f808001, 0x3f81, "just above the tie: up"},
      {0x3f818000, 0x3f82, "tie, 0x3f81 odd: up to even"},
      {0x3effffff, 0x3f00, "carry into the exponent"},
      {0x7f7f7fff, 0x7f7f, "largest finite bf16 (3.3895e38)"},
      {0x7f7f8000, 0x7f80, "tie above the largest finite: even = inf"},
      {0x7f7fffff, 0x7f80, "FLT_MAX rounds to inf"},
      {0x7f800000, 0x7f80, "+inf"},
      {0xff800000, 0xff80, "-inf"},
      {0x7fc00000, 0x7fc0, "quiet NaN"},
      {0x7f800001, 0x7fc0, "signalling NaN stays NaN (quiet)"},
      {0xffc00001, 0xffc0, "negative NaN"},
      {0x00010000, 0x0001, "smallest bf16 subnormal"},
      {0x00000001, 0x0000, "smallest float subnormal: to 0"},
      {0x00008000, 0x0000, "subnormal tie, 0 even: down"},
      {0x00018000, 0x0002, "subnormal tie, odd: up"},
      {0x807fffff, 0x8080, "largest subnormal rounds up to -min normal"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(FloatToBf16(F(c.in)), c.out)
        << std::hex << c.in << " (" << c.what << ")";
  }
}

TEST(HalfFloatTest, Fp16RoundsToNearestEven) {
  const std::vector<Case> cases = {
      {0x3f800000, 0x3c00, "1.0"},
      {0xc0000000, 0xc000, "-2.0"},
      {0x00000000, 0x0000, "+0"},
      {0x80000000, 0x8000, "-0"},
      {0x3eaaaaab, 0x3555, "1/3"},
      {0x3f801000, 0x3c00, "1 + 2^-11: tie, even down"},
      {0x3f803000, 0x3c02, "1 + 3*2^-11: tie, odd up"},
      {0x3f801001, 0x3c01, "just above the tie"},
      {0x477fe000, 0x7bff, "65504, largest finite"},
      {0x477fd000, 0x7bfe, "65488: tie between 65472 and 65504, even"},
      {0x477fefff, 0x7bff, "just below 65520: largest finite"},
      {0x477ff000, 0x7c00, "65520: tie, even = inf"},
      {0x7f7fffff, 0x7c00, "FLT_MAX: inf"},
      {0xff800000, 0xfc00, "-inf"},
      {0x7fc00000, 0x7e00, "quiet NaN"},
      {0x7f800001, 0x7e00, "signalling NaN stays NaN (quiet)"},
      {0xffc02000, 0xfe01, "negative NaN keeps the payload's top"},
      {0x38800000, 0x0400, "2^-14, smallest normal"},
      {0x387fc000, 0x03ff, "1023 * 2^-24, largest subnormal"},
      {0x387fe000, 0x0400, "1023.5 * 2^-24: tie, up to even normal"},
      {0x33800000, 0x0001, "2^-24, smallest subnormal"},
      {0x33000000, 0x0000, "2^-25: tie, even 0"},
      {0x33000001, 0x0001, "just above 2^-25"},
      {0x33400000, 0x0001, "0.75 * 2^-24: up"},
      {0x33c00000, 0x0002, "1.5 * 2^-24: tie, odd up"},
      {0xb3c00000, 0x8002, "-1.5 * 2^-24"},
      {0x32ffffff, 0x0000, "below 2^-25"},
      {0x00000001, 0x0000, "float subnormal"},
      {0x80000001, 0x8000, "negative float subnormal"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(FloatToFp16(F(c.in)), c.out)
        << std::hex << c.in << " (" << c.what << ")";
  }
}

TEST(HalfFloatTest, DecodesExactly) {
  EXPECT_EQ(Fp16ToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(Fp16ToFloat(0x03ff), 1023 * std::ldexp(1.0f, -24));
  EXPECT_EQ(Fp16ToFloat(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(Fp16ToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(Fp16ToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(B(Fp16ToFloat(0x8000)), 0x80000000u);
  EXPECT_EQ(B(Fp16ToFloat(0xfc00)), 0xff800000u);
  EXPECT_TRUE(std::isnan(Fp16ToFloat(0x7e00)));
  EXPECT_EQ(Bf16ToFloat(0x3eab), 0.333984375f);
  EXPECT_EQ(B(Bf16ToFloat(0x7f7f)), 0x7f7f0000u);
  EXPECT_EQ(B(Bf16ToFloat(0x0001)), 0x00010000u);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(0x7fc0)));
}

TEST(HalfFloatTest, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint16_t x = static_cast<uint16_t>(h);
    const float f = Fp16ToFloat(x);
    const float g = Bf16ToFloat(x);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(Fp16ToFloat(FloatToFp16(f))));
    } else {
      EXPECT_EQ(FloatToFp16(f), x) << std::hex << h;
    }
    if (std::isnan(g)) {
      EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(g))));
    } else {
      EXPECT_EQ(FloatToBf16(g), x) << std::hex << h;
    }
  }
}

TEST(HalfFloatTest, FitsSaysWhenAFiniteValueWouldBecomeInf) {
  EXPECT_TRUE(FitsFp16(65504.0f));
  EXPECT_TRUE(FitsFp16(F(0x477fefff)));
  EXPECT_FALSE(FitsFp16(65520.0f));
  EXPECT_FALSE(FitsFp16(-1e6f));
  EXPECT_TRUE(FitsFp16(std::numeric_limits<float>::infinity()));
  EXPECT_TRUE(FitsFp16(std::numeric_limits<float>::quiet_NaN()));
  EXPECT_TRUE(FitsBf16(F(0x7f7f7fff)));
  EXPECT_FALSE(FitsBf16(std::numeric_limits<float>::max()));
  EXPECT_TRUE(FitsBf16(1e38f));

  const std::vector<float> in = {1.0f, -70000.0f, 2.0f};
  std::vector<uint16_t> out(in.size());
  EXPECT_EQ(FloatsToFp16(in, absl::MakeSpan(out)), 1);
  EXPECT_EQ(FloatsToBf16(in, absl::MakeSpan(out)), -1);
  EXPECT_EQ(out[1], FloatToBf16(-70000.0f));
}

}  // namespace
}  // namespace ps
