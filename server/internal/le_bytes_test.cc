#include "server/internal/le_bytes.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace internal {
namespace {

TEST(LeBytesTest, IntegersLeastSignificantByteFirst) {
  std::string out;
  PutLe(0x0102030405060708ull, 8, &out);
  PutLe(0xAABBCCDDu, 4, &out);
  PutLe(0x1FF, 1, &out);  // only the low byte
  EXPECT_EQ(out, std::string("\x08\x07\x06\x05\x04\x03\x02\x01"
                             "\xDD\xCC\xBB\xAA"
                             "\xFF",
                             13));
  EXPECT_EQ(GetLe(out.data(), 8), 0x0102030405060708ull);
  EXPECT_EQ(GetLe(out.data() + 8, 4), 0xAABBCCDDu);
  EXPECT_EQ(GetLe(out.data() + 12, 1), 0xFFu);
}

TEST(LeBytesTest, SetLeOverwritesAndReturnsTheEnd) {
  std::string out(6, 'x');
  char* end = SetLe(0x11223344u, 4, &out[1]);
  EXPECT_EQ(end, &out[5]);
  EXPECT_EQ(out, std::string("x\x44\x33\x22\x11x", 6));
}

TEST(LeBytesTest, FloatsRoundTripBitwise) {
  const std::vector<float> v = {0.0f, -0.0f, 1.5f, -3.25e-38f, 7e30f};
  std::string out;
  AppendFloats(v, &out);
  ASSERT_EQ(out.size(), v.size() * 4);
  uint32_t bits;
  std::memcpy(&bits, &v[2], 4);
  EXPECT_EQ(GetLe(out.data() + 8, 4), bits);
  std::vector<float> back(v.size());
  ReadFloats(out.data(), absl::MakeSpan(back));
  EXPECT_EQ(std::memcmp(back.data(), v.data(), v.size() * 4), 0);
}

TEST(LeBytesTest, BlocksAreTheSameBytesAsOneByOne) {
  const std::vector<uint64_t> ids = {1, 0xFEDCBA9876543210ull, 0};
  const std::vector<float> values = {2.5f, -1.0f};
  std::string scratch, want;
  for (uint64_t id : ids) PutLe(id, 8, &want);
  EXPECT_EQ(std::string(LeView(absl::MakeConstSpan(ids), &scratch)), want);
  want.clear();
  AppendFloats(values, &want);
  EXPECT_EQ(std::string(LeView(absl::MakeConstSpan(values), &scratch)), want);
  EXPECT_TRUE(LeView(absl::Span<const uint64_t>(), &scratch).empty());
}

TEST(LeBytesTest, LeToHostUndoesLeView) {
  const std::vector<uint64_t> ids = {5, 0x0102030405060708ull};
  const std::vector<float> values = {0.25f, -8.0f};
  std::string scratch;
  std::vector<uint64_t> ids_back(ids.size());
  const absl::string_view id_bytes = LeView(absl::MakeConstSpan(ids), &scratch);
  std::memcpy(ids_back.data(), id_bytes.data(), id_bytes.size());
  LeToHost(absl::MakeSpan(ids_back));
  EXPECT_EQ(ids_back, ids);
  std::vector<float> values_back(values.size());
  const absl::string_view value_bytes =
      LeView(absl::MakeConstSpan(values), &scratch);
  std::memcpy(values_back.data(), value_bytes.data(), value_bytes.size());
  LeToHost(absl::MakeSpan(values_back));
  EXPECT_EQ(values_back, values);
}

}  // namespace
}  // namespace internal
}  // namespace ps
