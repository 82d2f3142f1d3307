// Little-endian integers and floats, the byte order of every file the shard
// writes (the dense checkpoint, the optimizer state, the sparse tables'
// streams) and of the values that travel on the wire. One definition for
// the dense side (server/checkpoint*.cc, server/optimizer.cc) and the
// sparse one (server/sparse/).
//
//   std::string out;
//   PutLe(step, 8, &out);                 // 8 bytes, least significant first
//   const uint64_t back = GetLe(out.data(), 8);
//
// Stateless; every function may be called from any thread.
#ifndef SERVER_INTERNAL_LE_BYTES_H_
#define SERVER_INTERNAL_LE_BYTES_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ps {
namespace internal {

inline constexpr bool kLittleEndianHost =
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;

// Appends the low `bytes` bytes of `v`, little-endian.
inline void PutLe(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) {
    out->push_back(static_cast<char>(v >> (8 * i)));
  }
}

// Overwrites `bytes` bytes at `at` with the low bytes of `v`, little-endian;
// returns the end of what it wrote.
inline char* SetLe(uint64_t v, int bytes, char* at) {
  for (int i = 0; i < bytes; ++i) at[i] = static_cast<char>(v >> (8 * i));
  return at + bytes;
}

// Reads a `bytes`-byte little-endian integer at `p`.
inline uint64_t GetLe(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  }
  return v;
}

// Appends `v` as little-endian floats (their IEEE-754 bits).
void AppendFloats(absl::Span<const float> v, std::string* out);
// Reads out.size() little-endian floats at `p`.
void ReadFloats(const char* p, absl::Span<float> out);

// The little-endian bytes of `v`, for writing it as one block: `v`'s own
// memory on a little-endian host (no copy), else encoded into `*scratch`,
// which must then outlive the view.
absl::string_view LeView(absl::Span<const uint64_t> v, std::string* scratch);
absl::string_view LeView(absl::Span<const float> v, std::string* scratch);

// Values whose memory was filled with little-endian bytes (the block LeView
// wrote), to host order in place; nothing to do on a little-endian host.
void LeToHost(absl::Span<uint64_t> v);
void LeToHost(absl::Span<float> v);

}  // namespace internal
}  // namespace ps

#endif  // SERVER_INTERNAL_LE_BYTES_H_
