#include "core/half_float.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace ps {
namespace {

inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

constexpr uint32_t kF32SignMask = 0x80000000u;
constexpr uint32_t kF32AbsMask = 0x7fffffffu;
constexpr uint32_t kF32Inf = 0x7f800000u;
constexpr int kF32MantissaBits = 23;
constexpr int kF32Bias = 127;
// bf16 is the top half of a float32.
constexpr int kBf16Shift = 16;
constexpr uint16_t kBf16QuietBit = 0x0040;
// Floats from here on round to bf16 infinity: halfway between the largest
// finite bf16 (0x7f7f) and infinity, where the tie goes to the even inf.
constexpr uint32_t kBf16OverflowAbs = 0x7f7f8000u;
// fp16: 5 exponent bits (bias 15), 10 mantissa bits.
constexpr int kFp16MantissaBits = 10;
constexpr int kFp16Bias = 15;
constexpr uint16_t kFp16SignMask = 0x8000;
constexpr uint16_t kFp16Inf = 0x7c00;
constexpr uint16_t kFp16QuietBit = 0x0200;
constexpr uint16_t kFp16MantissaMask = 0x03ff;
constexpr int kMantissaDrop = kF32MantissaBits - kFp16MantissaBits;  // 13
// 65520: halfway between 65504 (largest finite) and 65536; ties to even
// (infinity).
constexpr uint32_t kFp16OverflowAbs = 0x477ff000u;
// Biased float32 exponent of 2^-14, the smallest normal fp16.
constexpr uint32_t kFp16MinNormalExp = kF32Bias - kFp16Bias + 1;  // 113
// Below 2^-25 (biased exponent 102) every float rounds to fp16 zero.
constexpr uint32_t kFp16ZeroBelowExp = 102;

// Rounds m >> shift to nearest, ties to even.
inline uint32_t ShiftRoundEven(uint32_t m, int shift) {
  const uint32_t kept = m >> shift;
  const uint32_t rest = m & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  return kept + (rest > half || (rest == half && (kept & 1u)) ? 1u : 0u);
}

}  // namespace

uint16_t FloatToBf16(float f) {
  const uint32_t u = Bits(f);
  if ((u & kF32AbsMask) > kF32Inf) {
    return static_cast<uint16_t>((u >> kBf16Shift) | kBf16QuietBit);
  }
  // Adding 0x7fff plus the lowest kept bit rounds to nearest, ties to even;
  // a carry moves into the exponent, up to infinity.
  const uint32_t lsb = (u >> kBf16Shift) & 1u;
  return static_cast<uint16_t>((u + 0x7fffu + lsb) >> kBf16Shift);
}

float Bf16ToFloat(uint16_t h) {
  return FromBits(static_cast<uint32_t>(h) << kBf16Shift);
}

uint16_t FloatToFp16(float f) {
  const uint32_t u = Bits(f);
  const uint16_t sign = static_cast<uint16_t>((u & kF32SignMask) >> 16);
  const uint32_t a = u & kF32AbsMask;
  if (a > kF32Inf) {  // NaN: quiet, with the top of the payload
    return sign | kFp16Inf | kFp16QuietBit |
           static_cast<uint16_t>((a >> kMantissaDrop) & kFp16MantissaMask);
  }
  if (a >= kFp16OverflowAbs) return sign | kFp16Inf;
  const uint32_t exp = a >> kF32MantissaBits;
  if (exp < kFp16ZeroBelowExp) return sign;
  if (exp < kFp16MinNormalExp) {
    // Subnormal: the value in units of 2^-24, with the implicit bit.
    const uint32_t m =
        (a & ((1u << kF32MantissaBits) - 1)) | (1u << kF32MantissaBits);
    const int shift = static_cast<int>(kF32Bias - 1 - exp);  // 126 - exp
    return sign | static_cast<uint16_t>(ShiftRoundEven(m, shift));
  }
  // Normal: rebias the exponent and round off 13 mantissa bits (a carry
  // moves into the exponent).
  const uint32_t rebased = a - ((kF32Bias - kFp16Bias) << kF32MantissaBits);
  return sign | static_cast<uint16_t>(ShiftRoundEven(rebased, kMantissaDrop));
}

float Fp16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & kFp16SignMask) << 16;
  const uint32_t exp = (h & kFp16Inf) >> kFp16MantissaBits;
  const uint32_t mant = h & kFp16MantissaMask;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float32
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign != 0 ? -v : v;
  }
  if (exp == (kFp16Inf >> kFp16MantissaBits)) {
    return FromBits(sign | kF32Inf | (mant << kMantissaDrop));
  }
  return FromBits(sign | ((exp + kF32Bias - kFp16Bias) << kF32MantissaBits) |
                  (mant << kMantissaDrop));
}

bool FitsBf16(float f) {
  const uint32_t a = Bits(f) & kF32AbsMask;
  return a < kBf16OverflowAbs || a >= kF32Inf;
}

bool FitsFp16(float f) {
  const uint32_t a = Bits(f) & kF32AbsMask;
  return a < kFp16OverflowAbs || a >= kF32Inf;
}

namespace {

// Checks a block before converting it, so both loops are branch-free and
// the compiler vectorizes them; a block that does not fit is scanned again
// for the index.
constexpr size_t kConvertBlock = 1024;

template <bool (*kFits)(float), uint16_t (*kConvert)(float)>
int64_t ConvertChecked(absl::Span<const float> in, absl::Span<uint16_t> out) {
  for (size_t begin = 0; begin < in.size(); begin += kConvertBlock) {
    const size_t end = std::min(in.size(), begin + kConvertBlock);
    bool fits = true;
    for (size_t i = begin; i < end; ++i) fits &= kFits(in[i]);
    if (!fits) {
      for (size_t i = begin; i < end; ++i) {
        if (!kFits(in[i])) return static_cast<int64_t>(i);
      }
    }
    for (size_t i = begin; i < end; ++i) out[i] = kConvert(in[i]);
  }
  return -1;
}

}  // namespace

int64_t FloatsToBf16(absl::Span<const float> in, absl::Span<uint16_t> out) {
  return ConvertChecked<FitsBf16, FloatToBf16>(in, out);
}

int64_t FloatsToFp16(absl::Span<const float> in, absl::Span<uint16_t> out) {
  return ConvertChecked<FitsFp16, FloatToFp16>(in, out);
}

void Bf16ToFloats(absl::Span<const uint16_t> in, absl::Span<float> out) {
  for (size_t i = 0; i < in.size(); ++i) out[i] = Bf16ToFloat(in[i]);
}

void Fp16ToFloats(absl::Span<const uint16_t> in, absl::Span<float> out) {
  for (size_t i = 0; i < in.size(); ++i) out[i] = Fp16ToFloat(in[i]);
}

}  // namespace ps
