#include "server/internal/le_bytes.h"

#include <cstring>

namespace ps {
namespace internal {

void AppendFloats(absl::Span<const float> v, std::string* out) {
  const size_t at = out->size();
  out->resize(at + v.size() * sizeof(float));
  char* dst = &(*out)[at];
  if (kLittleEndianHost) {
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
  if (kLittleEndianHost) {
    if (!out.empty()) std::memcpy(out.data(), p, out.size() * sizeof(float));
    return;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    const uint32_t bits = static_cast<uint32_t>(GetLe(p + 4 * i, 4));
    std::memcpy(&out[i], &bits, 4);
  }
}

absl::string_view LeView(absl::Span<const uint64_t> v, std::string* scratch) {
  if (kLittleEndianHost) {
    return absl::string_view(reinterpret_cast<const char*>(v.data()),
                             v.size() * sizeof(uint64_t));
  }
  scratch->clear();
  for (uint64_t x : v) PutLe(x, 8, scratch);
  return *scratch;
}

absl::string_view LeView(absl::Span<const float> v, std::string* scratch) {
  if (kLittleEndianHost) {
    return absl::string_view(reinterpret_cast<const char*>(v.data()),
                             v.size() * sizeof(float));
  }
  scratch->clear();
  AppendFloats(v, scratch);
  return *scratch;
}

void LeToHost(absl::Span<uint64_t> v) {
  if (kLittleEndianHost) return;
  for (uint64_t& x : v) {
    char b[8];
    std::memcpy(b, &x, 8);
    x = GetLe(b, 8);
  }
}

void LeToHost(absl::Span<float> v) {
  if (kLittleEndianHost) return;
  for (float& x : v) {
    char b[4];
    std::memcpy(b, &x, 4);
    const uint32_t bits = static_cast<uint32_t>(GetLe(b, 4));
    std::memcpy(&x, &bits, 4);
  }
}

}  // namespace internal
}  // namespace ps
