#include "core/float_bytes.h"

#include <algorithm>
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

// `bytes` cut into pieces of the given sizes (the last takes the rest),
// each copied to its own buffer at an odd address, as gRPC's frames are.
struct SplitBytes {
  std::vector<std::string> storage;
  BytePieces pieces;
  SplitBytes(const std::string& bytes, const std::vector<size_t>& sizes) {
    size_t at = 0;
    for (size_t i = 0; i <= sizes.size() && at <= bytes.size(); ++i) {
      const size_t n = i < sizes.size() ? std::min(sizes[i], bytes.size() - at)
                                        : bytes.size() - at;
      storage.push_back("x" + bytes.substr(at, n));
      at += n;
    }
    for (const std::string& s : storage) {
      pieces.pieces.push_back(absl::string_view(s).substr(1));
    }
  }
};

TEST(FloatBytesTest, PiecesSplitAnywhereReadAsTheWholePayload) {
  std::vector<float> values(3000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * i - 7.0f;
  std::string bytes;
  EncodeFloats(values, &bytes);
  const std::vector<std::vector<size_t>> cuts = {
      {}, {1}, {3, 5, 4097}, {4096, 4096}, {16384}, {7, 0, 9, 11, 6001}};
  for (const std::vector<size_t>& cut : cuts) {
    SplitBytes split(bytes, cut);
    EXPECT_EQ(split.pieces.size(), bytes.size());
    EXPECT_EQ(split.pieces.Flatten(), bytes);
    std::vector<float> back(values.size());
    DecodeFloats(split.pieces, absl::MakeSpan(back));
    EXPECT_EQ(back, values);
    std::vector<float> blocks(values.size(), -1.0f);
    FloatBlockReader in(split.pieces);
    size_t total = 0;
    for (absl::Span<const float> b = in.Next(); !b.empty(); b = in.Next()) {
      EXPECT_EQ(in.first(), total);
      EXPECT_LE(b.size(), FloatBlockReader::kBlockFloats);
      std::copy(b.begin(), b.end(), blocks.begin() + in.first());
      total += b.size();
    }
    EXPECT_EQ(total, values.size());
    EXPECT_EQ(blocks, values);
    EXPECT_EQ(FirstNonFinite(split.pieces), -1);
  }
}

TEST(FloatBytesTest, FindsFirstNonFiniteInPieces) {
  std::vector<float> values(5000, 0.5f);
  for (size_t at : {size_t{0}, size_t{1}, size_t{1023}, size_t{1024},
                    size_t{2047}, size_t{4999}}) {
    std::vector<float> v = values;
    v[at] = std::numeric_limits<float>::quiet_NaN();
    v[4999] = std::numeric_limits<float>::infinity();  // later: must not win
    std::string bytes;
    EncodeFloats(v, &bytes);
    // The NaN's bytes straddle two pieces when the cut lands inside it.
    SplitBytes split(bytes, {4 * at + 2, 4097});
    EXPECT_EQ(FirstNonFinite(split.pieces), static_cast<int64_t>(at));
  }
}

}  // namespace
}  // namespace ps
