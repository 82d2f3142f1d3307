#include "worker/client/gradient_encoder.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/wire_format.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

WireSpec Wire(WireFormat format, float fraction = 1.0f) {
  WireSpec w;
  w.set_format(format);
  w.set_topk_fraction(fraction);
  return w;
}

std::vector<uint32_t> OffsetsOf(const EncodedChunk& c) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < c.indices.size() / 4; ++i) {
    out.push_back(OffsetAt(c.indices, i));
  }
  return out;
}

// What the shard decodes from `c` for a chunk of `length` elements.
std::vector<float> Decoded(const EncodedChunk& c, size_t length) {
  std::vector<float> out(length);
  PayloadProblem problem;
  EXPECT_TRUE(
      CheckPayload(c.format, c.data, c.indices, length, "c", &problem).ok());
  DecodePayload(c.format, c.data, c.indices, absl::MakeSpan(out));
  return out;
}

TEST(GradientEncoderTest, Fp32DenseIsPassthrough) {
  GradientEncoder enc(Wire(FP32), {4});
  EXPECT_TRUE(enc.passthrough());
  GradientEncoder narrow(Wire(BF16), {4});
  EXPECT_FALSE(narrow.passthrough());
  EXPECT_FALSE(narrow.topk());
}

TEST(GradientEncoderTest, DenseFp16FallsBackToFp32WhenAValueDoesNotFit) {
  GradientEncoder enc(Wire(FP16), {3, 2});
  EncodedChunk c;
  enc.Encode(0, std::vector<float>{1.0f, -2.0f, 0.5f}, &c);
  EXPECT_EQ(c.format, FP16);
  EXPECT_EQ(c.data, std::string("\x00\x3c\x00\xc0\x00\x38", 6));
  EXPECT_EQ(enc.fallbacks(), 0u);
  enc.Encode(1, std::vector<float>{1.0f, 1e5f}, &c);
  EXPECT_EQ(c.format, WIRE_FORMAT_UNSPECIFIED);
  EXPECT_EQ(Decoded(c, 2), (std::vector<float>{1.0f, 1e5f}));
  EXPECT_EQ(enc.fallbacks(), 1u);
}

TEST(GradientEncoderTest, TopkSendsTheLargestWithTiesByOffset) {
  GradientEncoder enc(Wire(FP32, 0.3f), {10});
  EXPECT_EQ(enc.TopkCount(10), 3u);
  EXPECT_EQ(enc.TopkCount(1000), 300u);
  EXPECT_EQ(enc.TopkCount(1), 1u);
  EncodedChunk c;
  // |v|: 3 at offsets 7 and 2 (a tie with 1 at offset 5 for the third).
  enc.Encode(0, std::vector<float>{0, 1, -3, 0, 0.5f, -1, 0, 3, 0, 0}, &c);
  EXPECT_EQ(OffsetsOf(c), (std::vector<uint32_t>{1, 2, 7}));
  EXPECT_EQ(Decoded(c, 10),
            (std::vector<float>{0, 1, -3, 0, 0, 0, 0, 3, 0, 0}));
  EXPECT_EQ(enc.Residual(0),
            (std::vector<float>{0, 0, 0, 0, 0.5f, -1, 0, 0, 0, 0}));
  // Next step: the residual is added first, so offset 5 (-1 - 1) wins.
  enc.Encode(0, std::vector<float>{0, 0, 0, 0, 0, -1, 0, 0, 0, 0.25f}, &c);
  EXPECT_EQ(OffsetsOf(c), (std::vector<uint32_t>{4, 5, 9}));
  EXPECT_EQ(Decoded(c, 10),
            (std::vector<float>{0, 0, 0, 0, 0.5f, -2, 0, 0, 0, 0.25f}));
}

// Error feedback: over several steps, what was sent plus what is left in
// the residual is what the gradients summed to. Multiples of 2^-8 in a
// small range keep every float addition exact, so the check is exact.
TEST(GradientEncoderTest, SentPlusResidualEqualsTheSumOfTheGradients) {
  const size_t n = 257;
  for (float fraction : {0.01f, 0.1f, 0.5f, 1.0f / 3}) {
    SCOPED_TRACE(fraction);
    GradientEncoder enc(Wire(FP32, fraction), {n});
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> step(-512, 512);
    std::vector<float> sum_grad(n, 0.0f), sum_sent(n, 0.0f);
    for (int t = 0; t < 20; ++t) {
      std::vector<float> g(n);
      for (float& x : g) x = static_cast<float>(step(rng)) / 256.0f;
      EncodedChunk c;
      enc.Encode(0, g, &c);
      EXPECT_EQ(c.indices.size() / 4, enc.TopkCount(n));
      const std::vector<float> sent = Decoded(c, n);
      for (size_t i = 0; i < n; ++i) {
        sum_grad[i] += g[i];
        sum_sent[i] += sent[i];
      }
      const std::vector<float> residual = enc.Residual(0);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(sum_sent[i] + residual[i], sum_grad[i])
            << "step " << t << " element " << i;
      }
    }
  }
}

// With BF16 values the residual also keeps each sent value's rounding
// error; the identity then holds up to the rounding of the sums.
TEST(GradientEncoderTest, Bf16TopkFeedsTheRoundingErrorBack) {
  const size_t n = 100;
  GradientEncoder enc(Wire(BF16, 0.05f), {n});
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<double> sum_grad(n, 0.0), sum_sent(n, 0.0);
  for (int t = 0; t < 30; ++t) {
    std::vector<float> g(n);
    for (float& x : g) x = normal(rng);
    EncodedChunk c;
    enc.Encode(0, g, &c);
    EXPECT_EQ(c.format, BF16);
    const std::vector<float> sent = Decoded(c, n);
    for (size_t i = 0; i < n; ++i) {
      sum_grad[i] += g[i];
      sum_sent[i] += sent[i];
    }
  }
  const std::vector<float> residual = enc.Residual(0);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_NEAR(sum_sent[i] + residual[i], sum_grad[i], 1e-4) << i;
  }
}

// The offsets a full sort selects: the first k of (|v| descending, offset
// ascending), in offset order.
std::vector<uint32_t> FullSortTopk(const std::vector<float>& g, size_t k) {
  std::vector<uint32_t> ref(g.size());
  for (uint32_t i = 0; i < g.size(); ++i) ref[i] = i;
  std::stable_sort(ref.begin(), ref.end(), [&](uint32_t a, uint32_t b) {
    return std::fabs(g[a]) > std::fabs(g[b]);
  });
  ref.resize(k);
  std::sort(ref.begin(), ref.end());
  return ref;
}

// Many ties: the selection is the first k of (|v| descending, offset
// ascending), the same on every run.
TEST(GradientEncoderTest, SelectionMatchesAFullSortWithManyTies) {
  const size_t n = 1000;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> small(-3, 3);
  for (float fraction : {0.001f, 0.05f, 0.5f, 0.999f}) {
    GradientEncoder enc(Wire(FP32, fraction), {n});
    std::vector<float> g(n);
    for (float& x : g) x = static_cast<float>(small(rng));
    EncodedChunk c;
    enc.Encode(0, g, &c);
    EXPECT_EQ(OffsetsOf(c), FullSortTopk(g, enc.TopkCount(n))) << fraction;
  }
}

TEST(GradientEncoderTest, SelectionMatchesAFullSortOverManyMagnitudes) {
  // Magnitudes over 40 decades, so the k-th largest falls in one bucket of
  // the selection's histogram with entries on both sides of it.
  const size_t n = 20000;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> decade(-20.0f, 20.0f);
  for (float fraction : {0.0001f, 0.01f, 0.3f}) {
    GradientEncoder enc(Wire(FP32, fraction), {n});
    std::vector<float> g(n);
    for (float& x : g) x = normal(rng) * std::pow(10.0f, decade(rng));
    g[7] = g[9] = std::numeric_limits<float>::infinity();
    EncodedChunk c;
    enc.Encode(0, g, &c);
    EXPECT_EQ(OffsetsOf(c), FullSortTopk(g, enc.TopkCount(n))) << fraction;
  }
}

TEST(GradientEncoderTest, ChunksKeepTheirOwnResidual) {
  GradientEncoder enc(Wire(FP32, 0.5f), {2, 2});
  EncodedChunk c;
  enc.Encode(0, std::vector<float>{1, 2}, &c);
  enc.Encode(1, std::vector<float>{4, 3}, &c);
  EXPECT_EQ(enc.Residual(0), (std::vector<float>{1, 0}));
  EXPECT_EQ(enc.Residual(1), (std::vector<float>{0, 3}));
}

// A step encoded again (a refused step rerun after a re-placement, with the
// same gradient) gets its encoding back and the residual moves once: the
// same residuals and wire bytes as encoding every step once.
TEST(GradientEncoderTest, AStepEncodedAgainIsEncodedOnce) {
  const size_t n = 64;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> steps(4, std::vector<float>(n));
  for (auto& g : steps) {
    for (float& x : g) x = normal(rng);
  }
  for (WireFormat format : {FP32, BF16}) {
    SCOPED_TRACE(format);
    GradientEncoder once(Wire(format, 0.1f), {n});
    GradientEncoder twice(Wire(format, 0.1f), {n});
    for (uint64_t t = 0; t < steps.size(); ++t) {
      EncodedChunk a, b, again;
      once.EncodeStep(0, t, steps[t], &a);
      twice.EncodeStep(0, t, steps[t], &b);
      twice.EncodeStep(0, t, steps[t], &again);  // the rerun
      EXPECT_EQ(again.data, b.data);
      EXPECT_EQ(again.indices, b.indices);
      EXPECT_EQ(b.data, a.data);
      EXPECT_EQ(b.indices, a.indices);
      EXPECT_EQ(twice.Residual(0), once.Residual(0));
    }
    // Encode (no step) always encodes: the residual moves again.
    EncodedChunk c;
    const std::vector<float> before = twice.Residual(0);
    twice.Encode(0, steps[0], &c);
    EXPECT_NE(twice.Residual(0), before);
  }
}

TEST(GradientEncoderTest, ServesTheSameChunksAndWireOnly) {
  GradientEncoder enc(Wire(BF16, 0.1f), {10, 20});
  EXPECT_TRUE(enc.Serves(Wire(BF16, 0.1f), {10, 20}));
  EXPECT_FALSE(enc.Serves(Wire(BF16, 0.1f), {10, 21}));
  EXPECT_FALSE(enc.Serves(Wire(FP32, 0.1f), {10, 20}));
  EXPECT_FALSE(enc.Serves(Wire(BF16, 0.2f), {10, 20}));
}

}  // namespace
}  // namespace ps
