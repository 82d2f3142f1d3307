// Conversions between tensor payloads (`bytes` holding little-endian float32,
// see proto/ps.proto) and native float arrays.
//
//   std::vector<float> grad(chunk.length);
//   if (!DecodeFloats(data, absl::MakeSpan(grad))) { ... non-finite ... }
//   std::string reply;
//   EncodeFloats(params, &reply);
//
// On little-endian hosts every function is a memcpy or none at all (plus a
// branch-free scan for the finiteness check); big-endian hosts swap bytes.
#ifndef CORE_FLOAT_BYTES_H_
#define CORE_FLOAT_BYTES_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ps {

// Index of the first NaN or Inf among the floats in `bytes`, or -1 when every
// one is finite. `bytes.size()` must be a multiple of 4 (a trailing partial
// float is ignored). Reads `bytes` once; the common (all finite) case runs a
// vectorizable scan without per-element branches.
int64_t FirstNonFinite(absl::string_view bytes);

// Copies the little-endian float32 payload into `out`. Requires
// bytes.size() == 4 * out.size() (callers validate sizes first).
void DecodeFloats(absl::string_view bytes, absl::Span<float> out);

// The little-endian float32 payload `bytes` as native floats, without a
// copy where the host is little-endian (the payload's own storage, which
// must be 4-byte aligned, as heap and std::string buffers are); otherwise
// decoded into `*scratch`. Valid while both stay unchanged.
const float* NativeFloats(absl::string_view bytes, std::vector<float>* scratch);

// Converts the little-endian float32 payload held in `*bytes` to native
// floats in place (nothing to do on little-endian hosts) and returns them.
// `bytes->size()` must be a multiple of 4; the buffer must be 4-byte aligned
// (heap and std::string buffers are).
absl::Span<float> ToNativeFloats(std::string* bytes);

// A buffer ToNativeFloats converted, as floats again.
inline absl::Span<float> AsFloats(std::string& bytes) {
  return absl::MakeSpan(reinterpret_cast<float*>(&bytes[0]), bytes.size() / 4);
}
inline absl::Span<const float> AsFloats(const std::string& bytes) {
  return absl::MakeConstSpan(reinterpret_cast<const float*>(bytes.data()),
                             bytes.size() / 4);
}

// Replaces `*out` with the little-endian float32 encoding of `values`.
void EncodeFloats(absl::Span<const float> values, std::string* out);

}  // namespace ps

#endif  // CORE_FLOAT_BYTES_H_
