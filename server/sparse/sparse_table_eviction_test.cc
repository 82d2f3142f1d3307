// TTL and LRU eviction, and the memory budget with and without LRU.
#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/sparse/sparse_table.h"
#include "server/sparse/testing/sparse_table_test_util.h"

namespace ps {
namespace {

using sparse_test::CountingSgd;
using sparse_test::InitRow;
using sparse_test::kLr;
using sparse_test::MustCreate;
using sparse_test::PullRows;
using sparse_test::PushConst;
using sparse_test::SaveBytes;
using sparse_test::SmallOptions;
using ::testing::HasSubstr;

bool Stored(SparseTable& t, uint64_t id) {
  return PullRows(t, {id}) != InitRow(t.options(), id);
}

TEST(SparseTableTtlTest, EvictsRowsNotPushedForTtlSteps) {
  SparseTable::Options o = SmallOptions();
  o.ttl_steps = 10;
  auto t = MustCreate(o);
  CountingSgd sgd(o.dim);
  ASSERT_TRUE(PushConst(*t, {1, 2, 3}, 1.0f, 0, sgd).ok());
  ASSERT_TRUE(PushConst(*t, {2}, 1.0f, 5, sgd).ok());
  ASSERT_TRUE(PushConst(*t, {3}, 1.0f, 12, sgd).ok());
  ASSERT_TRUE(PushConst(*t, {3}, 1.0f, 4, sgd).ok());  // late: keeps step 12
  EXPECT_EQ(t->EvictExpired(9), 0u);
  EXPECT_EQ(t->EvictExpired(10), 1u);  // id 1: idle 10 steps
  EXPECT_FALSE(Stored(*t, 1));
  EXPECT_TRUE(Stored(*t, 2));
  EXPECT_EQ(t->EvictExpired(15), 1u);  // id 2
  EXPECT_TRUE(Stored(*t, 3));
  EXPECT_EQ(t->EvictExpired(22), 1u);  // id 3
  const SparseTable::Stats st = t->GetStats();
  EXPECT_EQ(st.rows, 0u);
  EXPECT_EQ(st.ttl_evictions, 3u);
  EXPECT_EQ(st.bytes_used, t->bytes_used());
  // A re-pushed row starts again from its initial value.
  ASSERT_TRUE(PushConst(*t, {1}, 2.0f, 30, sgd).ok());
  std::vector<float> want = InitRow(o, 1);
  for (float& v : want) v -= kLr * 2.0f;
  EXPECT_EQ(PullRows(*t, {1}), want);
}

TEST(SparseTableTtlTest, ManyRowsKeepTheIndexConsistent) {
  SparseTable::Options o = SmallOptions();
  o.ttl_steps = 1;
  auto t = MustCreate(o);
  CountingSgd sgd(o.dim);
  std::vector<uint64_t> even, odd;
  for (uint64_t id = 0; id < 2000; ++id) (id % 2 ? odd : even).push_back(id);
  ASSERT_TRUE(PushConst(*t, even, 1.0f, 1, sgd).ok());
  ASSERT_TRUE(PushConst(*t, odd, 1.0f, 2, sgd).ok());
  const uint64_t bytes = t->bytes_used();
  EXPECT_EQ(t->EvictExpired(2), 1000u);
  EXPECT_LT(t->bytes_used(), bytes);  // emptied slabs are freed
  for (uint64_t id = 0; id < 2000; ++id) {
    ASSERT_EQ(Stored(*t, id), id % 2 == 1) << id;
  }
}

// One stripe: LRU is exact. Slabs of 4 rows; the budget holds 8 rows.
SparseTable::Options LruOptions() {
  SparseTable::Options o = SmallOptions();
  o.num_stripes = 1;
  o.slab_rows = 4;
  o.lru = true;
  // 2 slabs of 4 records (56 bytes each) + pointers, index of 16 buckets.
  o.memory_budget_bytes = 2 * (4 * 56 + 8) + 16 * 8;
  return o;
}

TEST(SparseTableLruTest, EvictsLeastRecentlyPushedFirstWithinBudget) {
  SparseTable::Options o = LruOptions();
  auto t = MustCreate(o);
  CountingSgd sgd(o.dim);
  for (uint64_t id = 0; id < 8; ++id) {
    ASSERT_TRUE(PushConst(*t, {id}, 1.0f, id, sgd).ok());
  }
  EXPECT_EQ(t->GetStats().rows, 8u);
  EXPECT_EQ(t->GetStats().lru_evictions, 0u);
  ASSERT_TRUE(PushConst(*t, {0, 2}, 1.0f, 8, sgd).ok());  // 1 is now oldest
  ASSERT_TRUE(PushConst(*t, {100}, 1.0f, 9, sgd).ok());
  EXPECT_FALSE(Stored(*t, 1));
  EXPECT_TRUE(Stored(*t, 0));
  ASSERT_TRUE(PushConst(*t, {101, 102}, 1.0f, 10, sgd).ok());
  EXPECT_FALSE(Stored(*t, 3));
  EXPECT_FALSE(Stored(*t, 4));
  for (uint64_t id : {0, 2, 5, 6, 7, 100, 101, 102}) {
    EXPECT_TRUE(Stored(*t, id)) << id;
  }
  const SparseTable::Stats st = t->GetStats();
  EXPECT_EQ(st.rows, 8u);
  EXPECT_EQ(st.lru_evictions, 3u);
  EXPECT_LE(st.bytes_used, o.memory_budget_bytes);
}

TEST(SparseTableLruTest, BudgetHoldsUnderSustainedInsertsWithAdmission) {
  SparseTable::Options o = SmallOptions();
  o.num_stripes = 4;
  o.slab_rows = 16;
  o.lru = true;
  o.admission_count = 2;
  o.memory_budget_bytes = 64 << 10;
  auto t = MustCreate(o);
  CountingSgd sgd(o.dim);
  for (uint64_t step = 0; step < 200; ++step) {
    std::vector<uint64_t> ids;
    for (uint64_t k = 0; k < 64; ++k)
      ids.push_back((step * 37 + k * 11) % 5000);
    ASSERT_TRUE(PushConst(*t, ids, 1.0f, step, sgd).ok());
    ASSERT_LE(t->bytes_used(), o.memory_budget_bytes) << "step " << step;
  }
  const SparseTable::Stats st = t->GetStats();
  EXPECT_GT(st.lru_evictions, 0u);
  EXPECT_GT(st.rows, 100u);
}

TEST(SparseTableBudgetTest, NoEvictionRuleFailsThePushAndChangesNothing) {
  SparseTable::Options o = LruOptions();
  o.lru = false;
  auto t = MustCreate(o);
  CountingSgd sgd(o.dim);
  ASSERT_TRUE(PushConst(*t, {0, 1, 2, 3, 4, 5, 6}, 1.0f, 1, sgd).ok());
  const std::string before = SaveBytes(*t);
  const int calls = sgd.calls;
  // 2 new rows need a third slab; the existing row 0 alone would fit.
  const absl::Status st = PushConst(*t, {0, 7, 8}, 1.0f, 2, sgd);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(st.message()), HasSubstr("sparse table 'emb'"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("memory budget"));
  EXPECT_EQ(sgd.calls, calls);
  EXPECT_TRUE(SaveBytes(*t) == before);
  EXPECT_TRUE(PushConst(*t, {0, 7}, 1.0f, 3, sgd).ok());  // fits exactly
  EXPECT_EQ(t->GetStats().rows, 8u);
  EXPECT_LE(t->bytes_used(), o.memory_budget_bytes);
}

TEST(SparseTableBudgetTest, NoEvictionRuleIsAllOrNothingAcrossStripes) {
  SparseTable::Options o = SmallOptions();
  o.num_stripes = 4;
  o.slab_rows = 4;
  o.memory_budget_bytes = 4 * (4 * 56 + 8 + 16 * 8);  // 4 rows per stripe
  auto t = MustCreate(o);
  CountingSgd sgd(o.dim);
  std::vector<uint64_t> ids;
  for (uint64_t id = 0; id < 64; ++id) ids.push_back(id);
  const absl::Status st = PushConst(*t, ids, 1.0f, 1, sgd);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(sgd.calls, 0);
  EXPECT_EQ(t->GetStats().rows, 0u);
  EXPECT_EQ(t->bytes_used(), 0u);
}

}  // namespace
}  // namespace ps
