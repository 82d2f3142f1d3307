#include "server/sparse/row_initializer.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

using Kind = RowInitializer::Kind;

std::vector<float> Row(const RowInitializer& init, uint64_t id, size_t dim) {
  std::vector<float> v(dim);
  init.Fill(id, absl::MakeSpan(v));
  return v;
}

TEST(RowInitializerTest, KindsAndRanges) {
  EXPECT_EQ(Row({Kind::kZeros, 0, 0, 1}, 5, 3), std::vector<float>(3, 0.0f));
  EXPECT_EQ(Row({Kind::kConstant, 0.5f, 0, 1}, 5, 3),
            std::vector<float>(3, 0.5f));
  double sum = 0, sum2 = 0;
  const int n = 20000;
  for (uint64_t id = 0; id < n / 16; ++id) {
    for (float v : Row({Kind::kUniform, 0, 0.25f, 3}, id, 16)) {
      ASSERT_GE(v, -0.25f);
      ASSERT_LT(v, 0.25f);
    }
    for (float v : Row({Kind::kNormal, 0, 2.0f, 3}, id, 16)) {
      sum += v;
      sum2 += v * v;
    }
  }
  const double count = (n / 16) * 16;
  EXPECT_NEAR(sum / count, 0.0, 0.05);
  EXPECT_NEAR(std::sqrt(sum2 / count), 2.0, 0.05);
}

// Pure in (seed, id, element): a prefix of a longer row is the shorter row,
// repeated calls agree, and the seed and id both matter.
TEST(RowInitializerTest, PureFunctionOfSeedIdAndElement) {
  for (Kind k : {Kind::kUniform, Kind::kNormal}) {
    const RowInitializer init{k, 0, 1.0f, 42};
    const std::vector<float> a = Row(init, 7, 8);
    EXPECT_EQ(Row(init, 7, 8), a);
    std::vector<float> longer = Row(init, 7, 32);
    longer.resize(8);
    EXPECT_EQ(longer, a);
    EXPECT_NE(Row(init, 8, 8), a);
    EXPECT_NE(Row({k, 0, 1.0f, 43}, 7, 8), a);
  }
}

TEST(RowInitializerTest, ValidateNamesTheField) {
  EXPECT_TRUE(RowInitializer{}.Validate().ok());
  EXPECT_NE(RowInitializer({Kind::kUniform, 0, -1, 0})
                .Validate()
                .message()
                .find("init.scale"),
            std::string::npos);
  EXPECT_NE(RowInitializer({Kind::kZeros, 1, 0, 0})
                .Validate()
                .message()
                .find("init.value"),
            std::string::npos);
  EXPECT_NE(RowInitializer({Kind::kConstant, NAN, 0, 0})
                .Validate()
                .message()
                .find("init.value"),
            std::string::npos);
  EXPECT_FALSE(RowInitializer({static_cast<Kind>(9), 0, 0, 0}).Validate().ok());
}

}  // namespace
}  // namespace ps
