#include "core/wire_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/float_bytes.h"
#include "core/half_float.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "16-bit payloads and offsets are read as native integers");

namespace ps {
namespace {

constexpr size_t kFp32Bytes = 4, kHalfBytes = 2, kOffsetBytes = 4;

uint16_t HalfAt(absl::string_view data, size_t i) {
  uint16_t h;
  std::memcpy(&h, data.data() + kHalfBytes * i, sizeof(h));
  return h;
}

float FloatAt(absl::string_view data, size_t i) {
  float f;
  std::memcpy(&f, data.data() + kFp32Bytes * i, sizeof(f));
  return f;
}

// Dense `data` of `format` into `out` (sizes checked).
void DecodeDense(int format, absl::string_view data, absl::Span<float> out) {
  if (Resolved(static_cast<WireFormat>(format)) == FP32) {
    DecodeFloats(data, out);
    return;
  }
  const absl::Span<const uint16_t> halves(
      reinterpret_cast<const uint16_t*>(data.data()), out.size());
  if (format == BF16) {
    Bf16ToFloats(halves, out);
  } else {
    Fp16ToFloats(halves, out);
  }
}

}  // namespace

size_t ElementBytes(int format) {
  switch (format) {
    case WIRE_FORMAT_UNSPECIFIED:
    case FP32:
      return kFp32Bytes;
    case BF16:
    case FP16:
      return kHalfBytes;
    default:
      return 0;
  }
}

bool IsKnownWireFormat(int format) { return ElementBytes(format) > 0; }

WireFormat Resolved(WireFormat format) {
  return format == WIRE_FORMAT_UNSPECIFIED ? FP32 : format;
}

std::string WireFormatName(int format) {
  if (!IsKnownWireFormat(format)) return absl::StrCat(format);
  return WireFormat_Name(Resolved(static_cast<WireFormat>(format)));
}

WireFormat EncodeValues(WireFormat format, absl::Span<const float> values,
                        std::string* out) {
  format = Resolved(format);
  if (format == BF16 || format == FP16) {
    out->resize(kHalfBytes * values.size());
    const absl::Span<uint16_t> halves(reinterpret_cast<uint16_t*>(&(*out)[0]),
                                      values.size());
    const int64_t bad = format == BF16 ? FloatsToBf16(values, halves)
                                       : FloatsToFp16(values, halves);
    if (bad < 0) return format;
  }
  EncodeFloats(values, out);
  return WIRE_FORMAT_UNSPECIFIED;
}

float ValueAt(int format, absl::string_view data, size_t i) {
  switch (format) {
    case BF16:
      return Bf16ToFloat(HalfAt(data, i));
    case FP16:
      return Fp16ToFloat(HalfAt(data, i));
    default:
      return FloatAt(data, i);
  }
}

uint32_t OffsetAt(absl::string_view indices, size_t i) {
  uint32_t o;
  std::memcpy(&o, indices.data() + kOffsetBytes * i, sizeof(o));
  return o;
}

void AppendOffset(uint32_t offset, std::string* indices) {
  indices->append(reinterpret_cast<const char*>(&offset), sizeof(offset));
}

absl::Status CheckPayload(int format, absl::string_view data,
                          absl::string_view indices, uint64_t length,
                          absl::string_view field, PayloadProblem* problem) {
  return CheckPayload(format, data.size(), indices, length, field, problem);
}

absl::Status CheckPayload(int format, size_t data_bytes,
                          absl::string_view indices, uint64_t length,
                          absl::string_view field, PayloadProblem* problem) {
  auto bad = [&](PayloadProblem p, absl::string_view sub,
                 absl::string_view why) {
    *problem = p;
    return absl::InvalidArgumentError(absl::StrCat(field, ".", sub, ": ", why));
  };
  *problem = PayloadProblem::kNone;
  const size_t width = ElementBytes(format);
  if (width == 0) {
    return bad(
        PayloadProblem::kFormat, "format",
        absl::StrCat(format, " is not a known wire format (FP32, BF16, FP16)"));
  }
  if (indices.empty()) {
    if (data_bytes == length * width) return absl::OkStatus();
    return bad(
        PayloadProblem::kSize, "data",
        absl::StrCat(data_bytes, " bytes, expected ", length * width, " (",
                     length, " elements of ", WireFormatName(format), ")"));
  }
  if (indices.size() % kOffsetBytes != 0) {
    return bad(
        PayloadProblem::kIndices, "indices",
        absl::StrCat(indices.size(), " bytes, not whole uint32 offsets (byte ",
                     indices.size() - indices.size() % kOffsetBytes,
                     " starts a partial one)"));
  }
  const size_t n = indices.size() / kOffsetBytes;
  if (n > length) {
    return bad(
        PayloadProblem::kIndices, "indices",
        absl::StrCat(n, " offsets for a chunk of ", length, " elements"));
  }
  if (data_bytes != n * width) {
    return bad(PayloadProblem::kSize, "data",
               absl::StrCat(data_bytes, " bytes, expected ", n * width, " (", n,
                            " offsets, ", WireFormatName(format), ")"));
  }
  for (size_t i = 0; i < n; ++i) {
    const uint32_t o = OffsetAt(indices, i);
    if (o >= length) {
      return bad(
          PayloadProblem::kIndices, "indices",
          absl::StrCat("offset ", o, " at entry ", i, " (byte ",
                       kOffsetBytes * i, ") is outside [0, ", length, ")"));
    }
    if (i > 0 && o <= OffsetAt(indices, i - 1)) {
      return bad(
          PayloadProblem::kIndices, "indices",
          absl::StrCat("offset ", o, " at entry ", i, " (byte ",
                       kOffsetBytes * i, ") is not above the previous one (",
                       OffsetAt(indices, i - 1), ")"));
    }
  }
  return absl::OkStatus();
}

int64_t FirstNonFiniteValue(int format, absl::string_view data) {
  if (ElementBytes(format) == kFp32Bytes) return FirstNonFinite(data);
  // All exponent bits set: inf or NaN.
  const uint16_t exponent = format == BF16 ? 0x7f80 : 0x7c00;
  const size_t n = data.size() / kHalfBytes;
  for (size_t i = 0; i < n; ++i) {
    if ((HalfAt(data, i) & exponent) == exponent) {
      return static_cast<int64_t>(i);
    }
  }
  return -1;
}

void DecodePayload(int format, absl::string_view data,
                   absl::string_view indices, absl::Span<float> out) {
  if (indices.empty()) {
    DecodeDense(format, data, out);
    return;
  }
  std::fill(out.begin(), out.end(), 0.0f);
  const size_t n = indices.size() / kOffsetBytes;
  for (size_t i = 0; i < n; ++i) {
    out[OffsetAt(indices, i)] = ValueAt(format, data, i);
  }
}

}  // namespace ps
