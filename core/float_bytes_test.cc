#include "core/float_bytes.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(FloatBytesTest, EncodesLittleEndianAndRoundTrips) {
  const std::vector<float> values = {1.0f, -2.5f, 0.0f, 3.25e-3f};
  std::string bytes;
  EncodeFloats(values, &bytes);
  ASSERT_EQ(bytes.size(), 16u);
  // 1.0f is 0x3f800000: little-endian puts 0x00 0x00 0x80 0x3f first.
  EXPECT_EQ(static_cast<unsigned char>(bytes[2]), 0x80);
  EXPECT_EQ(static_cast<unsigned char>(bytes[3]), 0x3f);
  std::vector<float> back(values.size());
  DecodeFloats(bytes, absl::MakeSpan(back));
  EXPECT_EQ(back, values);
}

TEST(FloatBytesTest, NativeFloatsReadsThePayload) {
  const std::vector<float> values = {1.0f, -2.5f, 0.0f, 3.25e-3f, 7.0f};
  std::string bytes;
  EncodeFloats(values, &bytes);
  std::vector<float> scratch;
  const float* view = NativeFloats(bytes, &scratch);
  EXPECT_EQ(std::vector<float>(view, view + values.size()), values);
  // Replacing the encoding of a longer payload keeps no stale tail.
  EncodeFloats(absl::MakeConstSpan(values).subspan(0, 2), &bytes);
  EXPECT_EQ(bytes.size(), 8u);
}

TEST(FloatBytesTest, FindsFirstNonFiniteAnywhere) {
  std::vector<float> values(5000, 0.5f);
  std::string bytes;
  EncodeFloats(values, &bytes);
  EXPECT_EQ(FirstNonFinite(bytes), -1);
  EXPECT_EQ(FirstNonFinite(""), -1);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()};
  for (float special : specials) {
    for (size_t at : {size_t{0}, size_t{1023}, size_t{1024}, size_t{4999}}) {
      std::vector<float> v = values;
      v[at] = special;
      v[4999 - at / 2] = special;  // a later one must not win
      EncodeFloats(v, &bytes);
      EXPECT_EQ(FirstNonFinite(bytes),
                static_cast<int64_t>(std::min(at, 4999 - at / 2)))
          << special << " at " << at;
    }
  }
  // The largest finite float and denormals are finite.
  values[7] = std::numeric_limits<float>::max();
  values[8] = std::numeric_limits<float>::denorm_min();
  EncodeFloats(values, &bytes);
  EXPECT_EQ(FirstNonFinite(bytes), -1);
}

}  // namespace
}  // namespace ps
