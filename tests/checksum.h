// A checksum over parameter bits, for the multi-process tests' "unchanged"
// and "bitwise identical" checks.
//
//   EXPECT_EQ(ParamChecksum(after), ParamChecksum(before));
#ifndef TESTS_CHECKSUM_H_
#define TESTS_CHECKSUM_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ps {

// FNV-1a over the bytes of `v`.
inline uint64_t ParamChecksum(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ull;
  const unsigned char* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) {
    h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

}  // namespace ps

#endif  // TESTS_CHECKSUM_H_
