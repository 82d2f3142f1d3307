// 16-bit floats for the wire (proto/job.proto WireFormat): bfloat16 (8
// exponent bits, 7 mantissa bits) and IEEE 754 half (5 and 10), converted
// from float32 with round-to-nearest-even.
//
//   uint16_t h = FloatToFp16(x);
//   if (!FitsFp16(x)) { ... send float32 instead ... }
//   float back = Fp16ToFloat(h);
//
// NaN stays NaN (made quiet, sign kept), infinities stay infinities, and
// subnormals of the narrow format are produced and read exactly. A finite
// float beyond the narrow format's range rounds to infinity: the Fits*
// checks say when, so callers can refuse to put inf on the wire.
#ifndef CORE_HALF_FLOAT_H_
#define CORE_HALF_FLOAT_H_

#include <cstdint>

#include "absl/types/span.h"

namespace ps {

uint16_t FloatToBf16(float f);
float Bf16ToFloat(uint16_t h);
uint16_t FloatToFp16(float f);
float Fp16ToFloat(uint16_t h);

// False for a finite `f` that rounds to infinity in the format (NaN and
// infinities "fit": they convert to themselves).
bool FitsBf16(float f);
bool FitsFp16(float f);

// Element-wise conversions of spans of equal size. The encoders return the
// index of the first finite value that does not fit (nothing written past
// it is meaningful then), or -1.
int64_t FloatsToBf16(absl::Span<const float> in, absl::Span<uint16_t> out);
int64_t FloatsToFp16(absl::Span<const float> in, absl::Span<uint16_t> out);
void Bf16ToFloats(absl::Span<const uint16_t> in, absl::Span<float> out);
void Fp16ToFloats(absl::Span<const uint16_t> in, absl::Span<float> out);

}  // namespace ps

#endif  // CORE_HALF_FLOAT_H_
