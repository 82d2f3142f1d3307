#include "worker/data/ctr_example.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

CtrExample MakeExample() {
  CtrExample e;
  e.label = 1.0f;
  for (int j = 0; j < kCtrDenseFeatures; ++j) e.dense[j] = 0.5f * j;
  for (int f = 0; f < kCtrCategoricalFields; ++f) e.ids[f] = CtrId(f, 7 * f);
  return e;
}

TEST(CtrExampleTest, IdPacksFieldAndValue) {
  EXPECT_EQ(CtrId(0, 5), 5u);
  EXPECT_EQ(CtrId(25, kCtrMissingValue), (uint64_t{25} << 40) | (1ull << 32));
  EXPECT_EQ(CtrIdField(CtrId(17, kCtrValueLimit - 1)), 17);
  EXPECT_EQ(CtrIdValue(CtrId(17, kCtrValueLimit - 1)), kCtrValueLimit - 1);
}

// The byte offsets are the contract with numpy: label at 0, dense at 4,
// ids at 56, all little-endian.
TEST(CtrExampleTest, RecordLayout) {
  const CtrExample e = MakeExample();
  uint8_t rec[kCtrRecordBytes];
  EncodeCtrRecord(e, rec);
  const uint8_t one[4] = {0x00, 0x00, 0x80, 0x3f};  // 1.0f
  EXPECT_EQ(std::memcmp(rec, one, 4), 0);
  const uint8_t half[4] = {0x00, 0x00, 0x00, 0x3f};  // dense[1] = 0.5f
  EXPECT_EQ(std::memcmp(rec + 8, half, 4), 0);
  // ids[1] = (1 << 40) | 7: byte 0 = 7, byte 5 = 1.
  const uint8_t id1[8] = {7, 0, 0, 0, 0, 1, 0, 0};
  EXPECT_EQ(std::memcmp(rec + 56 + 8, id1, 8), 0);
  CtrExample back;
  DecodeCtrRecord(rec, &back);
  EXPECT_EQ(std::memcmp(&back, &e, sizeof(e)), 0);
}

TEST(CtrExampleTest, CheckNamesTheField) {
  EXPECT_TRUE(CheckCtrExample(MakeExample()).ok());
  struct Case {
    const char* name;
    void (*spoil)(CtrExample*);
    const char* want;
  };
  const Case cases[] = {
      {"label", [](CtrExample* e) { e->label = 0.5f; }, "label"},
      {"nan", [](CtrExample* e) { e->dense[3] = std::nanf(""); }, "dense[3]"},
      {"inf",
       [](CtrExample* e) {
         e->dense[12] = std::numeric_limits<float>::infinity();
       },
       "dense[12]"},
      {"field", [](CtrExample* e) { e->ids[4] = CtrId(5, 1); }, "ids[4]"},
  };
  for (const Case& c : cases) {
    CtrExample e = MakeExample();
    c.spoil(&e);
    const absl::Status s = CheckCtrExample(e);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(s.message(), HasSubstr(c.want)) << c.name;
  }
}

TEST(CtrExampleTest, BatchRoundTrip) {
  CtrBatch batch;
  batch.Resize(3);
  CtrExample e = MakeExample();
  for (size_t b = 0; b < 3; ++b) {
    e.ids[0] = CtrId(0, b);
    batch.Set(b, e);
  }
  EXPECT_EQ(batch.ids[2 * kCtrCategoricalFields], 2u);
  EXPECT_EQ(batch.dense[1 * kCtrDenseFeatures + 2], 1.0f);
  const CtrExample back = batch.Get(2);
  EXPECT_EQ(std::memcmp(&back, &e, sizeof(e)), 0);
}

}  // namespace
}  // namespace ps
