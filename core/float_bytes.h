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
#include <memory>
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

// The bytes of `v` as they lie in memory (ids and floats travel as
// little-endian bytes, copied as is): a view, valid while `v` is.
template <typename T>
absl::string_view BytesOf(absl::Span<const T> v) {
  return absl::string_view(reinterpret_cast<const char*>(v.data()),
                           v.size() * sizeof(T));
}
template <typename T>
absl::string_view BytesOf(const std::vector<T>& v) {
  return BytesOf(absl::MakeConstSpan(v));
}

// Replaces `*out` with the little-endian float32 encoding of `values`.
void EncodeFloats(absl::Span<const float> values, std::string* out);

// A payload read in place where it was received: the bytes of `pieces` in
// order (gRPC's receive slices, one per HTTP/2 frame, so a float may be
// split between two pieces and a piece need not be aligned). `keep` holds
// the pieces' storage when they must outlive the call that received them
// (null: borrowed for the call only).
struct BytePieces {
  std::vector<absl::string_view> pieces;
  std::shared_ptr<const void> keep;

  size_t size() const;
  void Clear() {
    pieces.clear();
    keep.reset();
  }
  // The bytes in one string (for the rare paths that need them whole).
  std::string Flatten() const;
};

// The same as the string_view versions, for a payload in pieces.
int64_t FirstNonFinite(const BytePieces& bytes);
// Requires bytes.size() == 4 * out.size().
void DecodeFloats(const BytePieces& bytes, absl::Span<float> out);

// Reads a little-endian float32 payload in pieces as native floats, a block
// at a time: in place where a piece holds a whole aligned block, else copied
// (and stitched across pieces) into a small buffer that stays in L1.
//
//   FloatBlockReader in(pieces);
//   for (auto b = in.Next(); !b.empty(); b = in.Next()) use(in.first(), b);
class FloatBlockReader {
 public:
  static constexpr size_t kBlockFloats = 1024;

  explicit FloatBlockReader(const BytePieces& bytes) : bytes_(bytes) {}
  FloatBlockReader(const FloatBlockReader&) = delete;
  FloatBlockReader& operator=(const FloatBlockReader&) = delete;

  // The next at most kBlockFloats floats; empty at the end (a trailing
  // partial float is ignored). Valid until the next call.
  absl::Span<const float> Next();
  // Index of the first float of the block Next() returned last.
  size_t first() const { return first_; }

 private:
  const BytePieces& bytes_;
  size_t piece_ = 0, offset_ = 0;  // the next byte to read
  size_t first_ = 0, next_ = 0;    // float indexes
  float block_[kBlockFloats];
};

}  // namespace ps

#endif  // CORE_FLOAT_BYTES_H_
