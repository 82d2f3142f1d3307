#include "core/wire_format.h"

#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

std::string Offsets(const std::vector<uint32_t>& offsets) {
  std::string out;
  for (uint32_t o : offsets) AppendOffset(o, &out);
  return out;
}

TEST(WireFormatTest, EncodesInTheFormatAndFallsBackWhenFp16Overflows) {
  const std::vector<float> values = {1.0f, -2.0f, 0.5f};
  std::string data;
  EXPECT_EQ(EncodeValues(FP32, values, &data), WIRE_FORMAT_UNSPECIFIED);
  EXPECT_EQ(data.size(), 12u);
  EXPECT_EQ(EncodeValues(BF16, values, &data), BF16);
  EXPECT_EQ(data, std::string("\x80\x3f\x00\xc0\x00\x3f", 6));
  EXPECT_EQ(EncodeValues(FP16, values, &data), FP16);
  EXPECT_EQ(data, std::string("\x00\x3c\x00\xc0\x00\x38", 6));

  const std::vector<float> big = {1.0f, 70000.0f};
  EXPECT_EQ(EncodeValues(FP16, big, &data), WIRE_FORMAT_UNSPECIFIED);
  ASSERT_EQ(data.size(), 8u);
  EXPECT_EQ(ValueAt(FP32, data, 1), 70000.0f);
  EXPECT_EQ(EncodeValues(BF16, big, &data), BF16);  // bf16 holds it
}

TEST(WireFormatTest, DecodesDenseAndSparse) {
  std::string data;
  EncodeValues(FP16, std::vector<float>{3.0f, -0.25f}, &data);
  std::vector<float> out(5, 9.0f);
  DecodePayload(FP16, data, Offsets({1, 4}), absl::MakeSpan(out));
  EXPECT_EQ(out, (std::vector<float>{0, 3.0f, 0, 0, -0.25f}));
  out.assign(2, 0);
  DecodePayload(FP16, data, "", absl::MakeSpan(out));
  EXPECT_EQ(out, (std::vector<float>{3.0f, -0.25f}));
}

struct BadCase {
  int format;
  std::string data;
  std::string indices;
  PayloadProblem problem;
  std::string message;
};

TEST(WireFormatTest, RejectsMalformedPayloadsNamingFieldAndOffset) {
  const std::vector<BadCase> cases = {
      {7, std::string(16, 0), "", PayloadProblem::kFormat,
       "g[1].format: 7 is not a known wire format"},
      {BF16, std::string(16, 0), "", PayloadProblem::kSize,
       "g[1].data: 16 bytes, expected 8 (4 elements of BF16)"},
      {FP32, std::string(4, 0), std::string(5, 0), PayloadProblem::kIndices,
       "g[1].indices: 5 bytes, not whole uint32 offsets (byte 4"},
      {FP32, std::string(20, 0), Offsets({0, 1, 2, 3, 3}),
       PayloadProblem::kIndices, "g[1].indices: 5 offsets for a chunk of 4"},
      {FP16, std::string(6, 0), Offsets({0, 2}), PayloadProblem::kSize,
       "g[1].data: 6 bytes, expected 4 (2 offsets, FP16)"},
      {FP32, std::string(8, 0), Offsets({0, 4}), PayloadProblem::kIndices,
       "g[1].indices: offset 4 at entry 1 (byte 4) is outside [0, 4)"},
      {FP32, std::string(12, 0), Offsets({0, 2, 2}), PayloadProblem::kIndices,
       "g[1].indices: offset 2 at entry 2 (byte 8) is not above the "
       "previous one (2)"},
      {FP32, std::string(8, 0), Offsets({3, 1}), PayloadProblem::kIndices,
       "offset 1 at entry 1 (byte 4) is not above"},
  };
  for (const BadCase& c : cases) {
    PayloadProblem problem;
    const absl::Status s =
        CheckPayload(c.format, c.data, c.indices, 4, "g[1]", &problem);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_NE(s.message().find(c.message), absl::string_view::npos)
        << s.message();
    EXPECT_EQ(problem, c.problem) << c.message;
  }
  PayloadProblem problem;
  EXPECT_TRUE(
      CheckPayload(FP16, std::string(4, 0), Offsets({1, 3}), 4, "g", &problem)
          .ok());
  EXPECT_TRUE(CheckPayload(0, std::string(16, 0), "", 4, "g", &problem).ok());
}

TEST(WireFormatTest, FindsNonFiniteValuesInEveryFormat) {
  std::string data;
  const float inf = std::numeric_limits<float>::infinity();
  EncodeValues(BF16, std::vector<float>{1.0f, 2.0f, inf}, &data);
  EXPECT_EQ(FirstNonFiniteValue(BF16, data), 2);
  EncodeValues(FP16, std::vector<float>{1.0f, inf}, &data);
  EXPECT_EQ(FirstNonFiniteValue(FP16, data), 1);
  EncodeValues(FP16, std::vector<float>{65504.0f, -1.0f}, &data);
  EXPECT_EQ(FirstNonFiniteValue(FP16, data), -1);
  EncodeValues(FP32, std::vector<float>{0.0f, inf}, &data);
  EXPECT_EQ(FirstNonFiniteValue(0, data), 1);
}

}  // namespace
}  // namespace ps
