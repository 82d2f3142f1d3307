#include "core/float_bytes.h"

#include <algorithm>
#include <cstring>

namespace ps {
namespace {

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
constexpr bool kLittleEndian = false;
#else
constexpr bool kLittleEndian = true;
#endif

inline uint32_t LoadLe32(const char* p) {
  uint32_t w;
  std::memcpy(&w, p, sizeof(w));
  if (!kLittleEndian) w = __builtin_bswap32(w);
  return w;
}

constexpr uint32_t kExponentMask = 0x7f800000u;

}  // namespace

int64_t FirstNonFinite(absl::string_view bytes) {
  const size_t n = bytes.size() / 4;
  const char* p = bytes.data();
  // Scan in blocks with a branch-free OR so the compiler vectorizes the inner
  // loop; only a block that holds a non-finite value is searched element-wise.
  constexpr size_t kBlock = 1024;
  for (size_t start = 0; start < n; start += kBlock) {
    const size_t end = start + kBlock < n ? start + kBlock : n;
    uint32_t bad = 0;
    for (size_t i = start; i < end; ++i) {
      const uint32_t w = LoadLe32(p + 4 * i);
      bad |= static_cast<uint32_t>((w & kExponentMask) == kExponentMask);
    }
    if (bad != 0) {
      for (size_t i = start; i < end; ++i) {
        if ((LoadLe32(p + 4 * i) & kExponentMask) == kExponentMask) {
          return static_cast<int64_t>(i);
        }
      }
    }
  }
  return -1;
}

void DecodeFloats(absl::string_view bytes, absl::Span<float> out) {
  if (kLittleEndian) {
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), 4 * out.size());
    return;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    const uint32_t w = LoadLe32(bytes.data() + 4 * i);
    std::memcpy(&out[i], &w, sizeof(w));
  }
}

const float* NativeFloats(absl::string_view bytes,
                          std::vector<float>* scratch) {
  if (kLittleEndian) return reinterpret_cast<const float*>(bytes.data());
  scratch->resize(bytes.size() / 4);
  DecodeFloats(bytes, absl::MakeSpan(*scratch));
  return scratch->data();
}

absl::Span<float> ToNativeFloats(std::string* bytes) {
  if (!kLittleEndian) {
    for (size_t i = 0; i + 4 <= bytes->size(); i += 4) {
      uint32_t w = LoadLe32(bytes->data() + i);
      std::memcpy(&(*bytes)[i], &w, sizeof(w));
    }
  }
  return AsFloats(*bytes);
}

void EncodeFloats(absl::Span<const float> values, std::string* out) {
  if (kLittleEndian) {
    // assign, not resize + copy: no zero-fill of the bytes about to be
    // overwritten (it showed up as 5% of psd's CPU in perf).
    out->assign(reinterpret_cast<const char*>(values.data()),
                4 * values.size());
    return;
  }
  out->resize(4 * values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    uint32_t w;
    std::memcpy(&w, &values[i], sizeof(w));
    w = __builtin_bswap32(w);
    std::memcpy(&(*out)[4 * i], &w, sizeof(w));
  }
}

size_t BytePieces::size() const {
  size_t n = 0;
  for (absl::string_view p : pieces) n += p.size();
  return n;
}

std::string BytePieces::Flatten() const {
  std::string out;
  out.reserve(size());
  for (absl::string_view p : pieces) out.append(p.data(), p.size());
  return out;
}

absl::Span<const float> FloatBlockReader::Next() {
  constexpr size_t kBlockBytes = sizeof(block_);
  while (piece_ < bytes_.pieces.size() &&
         offset_ == bytes_.pieces[piece_].size()) {
    ++piece_;
    offset_ = 0;
  }
  first_ = next_;
  if (piece_ == bytes_.pieces.size()) return {};
  const absl::string_view p = bytes_.pieces[piece_];
  const char* at = p.data() + offset_;
  if (kLittleEndian && p.size() - offset_ >= kBlockBytes &&
      reinterpret_cast<uintptr_t>(at) % alignof(float) == 0) {
    offset_ += kBlockBytes;
    next_ += kBlockFloats;
    return absl::MakeConstSpan(reinterpret_cast<const float*>(at),
                               kBlockFloats);
  }
  // Stitch whole floats from as many pieces as it takes.
  char* dst = reinterpret_cast<char*>(block_);
  size_t filled = 0;
  while (filled < kBlockBytes && piece_ < bytes_.pieces.size()) {
    const absl::string_view q = bytes_.pieces[piece_];
    const size_t n = std::min(kBlockBytes - filled, q.size() - offset_);
    std::memcpy(dst + filled, q.data() + offset_, n);
    filled += n;
    offset_ += n;
    if (offset_ == q.size()) {
      ++piece_;
      offset_ = 0;
    }
  }
  const size_t floats = filled / sizeof(float);
  if (!kLittleEndian) {
    for (size_t i = 0; i < floats; ++i) {
      const uint32_t w = LoadLe32(dst + sizeof(float) * i);
      std::memcpy(dst + sizeof(float) * i, &w, sizeof(w));
    }
  }
  next_ += floats;
  return absl::MakeConstSpan(block_, floats);
}

int64_t FirstNonFinite(const BytePieces& bytes) {
  if (!kLittleEndian) return FirstNonFinite(bytes.Flatten());
  FloatBlockReader in(bytes);
  for (absl::Span<const float> b = in.Next(); !b.empty(); b = in.Next()) {
    const int64_t at = FirstNonFinite(absl::string_view(
        reinterpret_cast<const char*>(b.data()), sizeof(float) * b.size()));
    if (at >= 0) return static_cast<int64_t>(in.first()) + at;
  }
  return -1;
}

void DecodeFloats(const BytePieces& bytes, absl::Span<float> out) {
  if (kLittleEndian) {
    char* dst = reinterpret_cast<char*>(out.data());
    for (absl::string_view p : bytes.pieces) {
      if (p.empty()) continue;
      std::memcpy(dst, p.data(), p.size());
      dst += p.size();
    }
    return;
  }
  FloatBlockReader in(bytes);
  for (absl::Span<const float> b = in.Next(); !b.empty(); b = in.Next()) {
    std::copy(b.begin(), b.end(), out.begin() + in.first());
  }
}

}  // namespace ps
