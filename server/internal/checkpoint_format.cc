#include "server/internal/checkpoint_format.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace ps {
namespace internal {
namespace {

constexpr bool kLittleEndian = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;

}  // namespace

void PutLe(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) {
    out->push_back(static_cast<char>(v >> (8 * i)));
  }
}

void SetLe(uint64_t v, int bytes, char* at) {
  for (int i = 0; i < bytes; ++i) at[i] = static_cast<char>(v >> (8 * i));
}

uint64_t GetLe(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  }
  return v;
}

void AppendFloats(absl::Span<const float> v, std::string* out) {
  const size_t at = out->size();
  out->resize(at + v.size() * sizeof(float));
  char* dst = &(*out)[at];
  if (kLittleEndian) {
    if (!v.empty()) std::memcpy(dst, v.data(), v.size() * sizeof(float));
    return;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], 4);
    SetLe(bits, 4, dst + 4 * i);
  }
}

void ReadFloats(const char* p, absl::Span<float> out) {
  if (kLittleEndian) {
    if (!out.empty()) std::memcpy(out.data(), p, out.size() * sizeof(float));
    return;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    const uint32_t bits = static_cast<uint32_t>(GetLe(p + 4 * i, 4));
    std::memcpy(&out[i], &bits, 4);
  }
}

bool Reader::Bytes(const std::string& what, uint64_t n,
                   absl::string_view* out) {
  if (!Need(what, n)) return false;
  *out = bytes_.substr(at_, n);
  at_ += n;
  return true;
}

bool Reader::Floats(const std::string& what, absl::Span<float> out) {
  if (out.size() > (bytes_.size() - at_) / sizeof(float)) {
    return Fail(what, out.size() * sizeof(float));
  }
  ReadFloats(bytes_.data() + at_, out);
  at_ += out.size() * sizeof(float);
  return true;
}

bool Reader::Need(const std::string& what, uint64_t n) {
  if (n <= bytes_.size() - at_) return true;
  return Fail(what, n);
}

bool Reader::Fail(const std::string& what, uint64_t n) {
  error_ = absl::StrCat("payload ends inside ", what, " (", n,
                        " bytes needed at payload offset ", at_, ", ",
                        bytes_.size() - at_, " left)");
  return false;
}

}  // namespace internal
}  // namespace ps
