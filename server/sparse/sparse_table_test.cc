#include "server/sparse/sparse_table.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/sparse/testing/sparse_table_test_util.h"

namespace ps {
namespace {

using sparse_test::CountingSgd;
using sparse_test::Fn;
using sparse_test::InitRow;
using sparse_test::kLr;
using sparse_test::MustCreate;
using sparse_test::PullRows;
using sparse_test::PushConst;
using sparse_test::SaveBytes;
using sparse_test::SmallOptions;
using ::testing::HasSubstr;

TEST(SparseTableOptionsTest, RejectsBadOptionsNamingTheField) {
  struct Case {
    const char* field;
    void (*mutate)(SparseTable::Options&);
  };
  const Case cases[] = {
      {"name", [](SparseTable::Options& o) { o.name = ""; }},
      {"dim", [](SparseTable::Options& o) { o.dim = 0; }},
      {"init.scale", [](SparseTable::Options& o) { o.init.scale = -1; }},
      {"init.value", [](SparseTable::Options& o) { o.init.value = 1; }},
      {"admission_count",
       [](SparseTable::Options& o) { o.admission_count = 0; }},
      {"num_stripes", [](SparseTable::Options& o) { o.num_stripes = 3; }},
      {"slab_rows", [](SparseTable::Options& o) { o.slab_rows = 0; }},
      {"hot_ids", [](SparseTable::Options& o) { o.hot_ids = 1 << 20; }},
      {"lru", [](SparseTable::Options& o) { o.lru = true; }},
      {"memory_budget_bytes",
       [](SparseTable::Options& o) { o.memory_budget_bytes = 100; }},
      {"state_floats_per_row",
       [](SparseTable::Options& o) { o.state_floats_per_row = 1 << 20; }},
  };
  for (const Case& c : cases) {
    SparseTable::Options o = SmallOptions();
    c.mutate(o);
    auto t = SparseTable::Create(o);
    ASSERT_FALSE(t.ok()) << c.field;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(c.field));
  }
  EXPECT_TRUE(SparseTable::Create(SmallOptions()).ok());
}

TEST(SparseTableTest, UnstoredRowsReadTheirInitialValueEveryTime) {
  auto t = MustCreate(SmallOptions());
  const std::vector<float> a = PullRows(*t, {3, 9, 3});
  ASSERT_EQ(a.size(), 12u);
  EXPECT_EQ(std::vector<float>(a.begin(), a.begin() + 4),
            InitRow(t->options(), 3));
  EXPECT_EQ(std::vector<float>(a.begin() + 8, a.end()),
            InitRow(t->options(), 3));
  EXPECT_NE(InitRow(t->options(), 3), InitRow(t->options(), 9));
  EXPECT_EQ(PullRows(*t, {3, 9, 3}), a);
  EXPECT_EQ(t->GetStats().rows, 0u);
  EXPECT_EQ(t->bytes_used(), 0u);
}

TEST(SparseTableTest, AdmissionCreatesTheRowOnTheNthPushFromItsInitialValue) {
  SparseTable::Options o = SmallOptions();
  o.admission_count = 3;
  auto t = MustCreate(o);
  CountingSgd sgd(o.dim);
  for (int push = 1; push <= 2; ++push) {
    ASSERT_TRUE(PushConst(*t, {42}, 1.0f, push, sgd).ok());
    EXPECT_EQ(PullRows(*t, {42}), InitRow(o, 42)) << "push " << push;
    const SparseTable::Stats st = t->GetStats();
    EXPECT_EQ(st.rows, 0u);
    EXPECT_EQ(st.pending_admission, 1u);
    EXPECT_GT(st.bytes_used, 0u);  // the counter's table is accounted
  }
  EXPECT_EQ(sgd.calls, 0);
  ASSERT_TRUE(PushConst(*t, {42}, 1.0f, 3, sgd).ok());
  EXPECT_EQ(sgd.calls, 1);
  std::vector<float> want = InitRow(o, 42);
  for (float& v : want) v -= kLr * 1.0f;
  EXPECT_EQ(PullRows(*t, {42}), want);
  const SparseTable::Stats st = t->GetStats();
  EXPECT_EQ(st.rows, 1u);
  EXPECT_EQ(st.pending_admission, 0u);
  EXPECT_EQ(st.admissions, 1u);
}

TEST(SparseTableTest, AdmissionCountsOncePerPushNotPerOccurrence) {
  SparseTable::Options o = SmallOptions();
  o.admission_count = 2;
  auto t = MustCreate(o);
  CountingSgd sgd(o.dim);
  ASSERT_TRUE(PushConst(*t, {5, 5, 5}, 1.0f, 1, sgd).ok());
  EXPECT_EQ(t->GetStats().rows, 0u);
  ASSERT_TRUE(PushConst(*t, {5}, 1.0f, 2, sgd).ok());
  EXPECT_EQ(t->GetStats().rows, 1u);
}

TEST(SparseTableTest, DuplicateIdsAreSummedInOrderAndUpdatedOnce) {
  SparseTable::Options o = SmallOptions();
  auto t = MustCreate(o);
  CountingSgd sgd(o.dim);
  const std::vector<uint64_t> ids = {5, 7, 5, 5};
  const float g[4] = {1e8f, 2.0f, 1.0f, -1e8f};
  std::vector<float> grads;
  for (float v : g) grads.insert(grads.end(), o.dim, v);
  ASSERT_TRUE(t->Push(ids, grads, 1, Fn(sgd)).ok());
  EXPECT_EQ(sgd.calls, 2);
  EXPECT_EQ(sgd.updated.size(), 2u);
  // First-occurrence order: (1e8 + 1) - 1e8 = 0 in float (1 is absorbed).
  const float sum5 = (g[0] + g[2]) + g[3];
  std::vector<float> want = InitRow(o, 5);
  for (float& v : want) v -= kLr * sum5;
  EXPECT_EQ(PullRows(*t, {5}), want);
  EXPECT_EQ(t->GetStats().rows_pushed, 2u);
}

TEST(SparseTableTest, BadPushesAreRejectedAndChangeNothing) {
  SparseTable::Options o = SmallOptions();
  o.id_bound = 100;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    const char* name;
    std::vector<uint64_t> ids;
    std::vector<float> grads;
    const char* want;
  };
  const std::vector<float> ok8(8, 1.0f);
  std::vector<float> with_nan = ok8;
  with_nan[6] = nan;
  std::vector<float> with_inf = ok8;
  with_inf[1] = -inf;
  const Case cases[] = {
      {"size", {1, 2}, std::vector<float>(7, 1.0f), "grads has 7 floats"},
      {"bound", {1, 100}, ok8, "ids[1] = 100 is out of range (id_bound 100)"},
      {"nan", {1, 2}, with_nan, "grads[6] is nan (id 2, element 2)"},
      {"inf", {1, 2}, with_inf, "grads[1] is -inf (id 1, element 1)"},
      {"overflow", {3, 3}, std::vector<float>(8, 3e38f), "overflows"},
  };
  for (const Case& c : cases) {
    auto t = MustCreate(o);
    CountingSgd sgd(o.dim);
    ASSERT_TRUE(PushConst(*t, {1, 50}, 1.0f, 1, sgd).ok());
    const std::string before = SaveBytes(*t);
    const int calls = sgd.calls;
    const absl::Status st = t->Push(c.ids, c.grads, 2, Fn(sgd));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(std::string(st.message()), HasSubstr("sparse table 'emb'"));
    EXPECT_THAT(std::string(st.message()), HasSubstr(c.want)) << st;
    EXPECT_EQ(sgd.calls, calls) << c.name;
    EXPECT_TRUE(SaveBytes(*t) == before) << c.name;
  }
}

TEST(SparseTableTest, BadPullsAreRejected) {
  SparseTable::Options o = SmallOptions();
  o.id_bound = 10;
  auto t = MustCreate(o);
  std::vector<float> out(8);
  const std::vector<uint64_t> out_of_range = {1, 10};
  absl::Status st = t->Pull(out_of_range, absl::MakeSpan(out));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("ids[1] = 10"));
  const std::vector<uint64_t> three = {1, 2, 3};
  st = t->Pull(three, absl::MakeSpan(out));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("out has 8 floats"));
}

TEST(SparseTableTest, StatsCountPullsPushesAndHottestIds) {
  SparseTable::Options o = SmallOptions();
  o.hot_ids = 2;
  auto t = MustCreate(o);
  CountingSgd sgd(o.dim);
  for (uint64_t step = 0; step < 10; ++step) {
    ASSERT_TRUE(PushConst(*t, {7, 8, 7, 100 + step}, 1.0f, step, sgd).ok());
    if (step % 2 == 0) {
      ASSERT_TRUE(PushConst(*t, {8}, 1.0f, step, sgd).ok());
    }
  }
  ASSERT_EQ(PullRows(*t, {7, 7, 1}).size(), 12u);
  const SparseTable::Stats st = t->GetStats();
  EXPECT_EQ(st.rows, 12u);
  EXPECT_EQ(st.admissions, 12u);
  EXPECT_EQ(st.rows_pushed, 35u);  // 3 unique x 10 pushes + 5
  EXPECT_EQ(st.rows_pulled, 3u);
  EXPECT_EQ(st.bytes_used, t->bytes_used());
  ASSERT_EQ(st.hottest.size(), 2u);
  EXPECT_EQ(st.hottest[0].id, 8u);
  EXPECT_EQ(st.hottest[0].pushes, 15u);
  EXPECT_EQ(st.hottest[1].id, 7u);
  EXPECT_EQ(st.hottest[1].pushes, 10u);
}

TEST(SparseTableTest, InitializerIsAPureFunctionOfSeedIdAndElement) {
  SparseTable::Options o = SmallOptions();
  o.init = {RowInitializer::Kind::kNormal, 0, 1.0f, 99};
  auto a = MustCreate(o);
  o.num_stripes = 1;  // layout must not matter
  auto b = MustCreate(o);
  const std::vector<uint64_t> ids = {0, 1, ~uint64_t{0}, 1ull << 40};
  EXPECT_EQ(PullRows(*a, ids), PullRows(*b, ids));
  o.init.seed = 100;
  auto c = MustCreate(o);
  EXPECT_NE(PullRows(*a, ids), PullRows(*c, ids));
}

}  // namespace
}  // namespace ps
