#include "worker/model/id_dedup.h"

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::TestWithParam;

template <typename T>
std::vector<T> ToVector(absl::Span<const T> s) {
  return std::vector<T>(s.begin(), s.end());
}

// The expected results, computed the obvious way with a std::map.
struct Expected {
  std::vector<uint64_t> unique_ids;
  std::vector<int32_t> indices;
  std::vector<int32_t> row_offsets;
  std::vector<int32_t> row_occurrences;
};

Expected Reference(const std::vector<uint64_t>& ids) {
  Expected e;
  std::map<uint64_t, int32_t> seen;
  std::vector<std::vector<int32_t>> occurrences;
  for (size_t p = 0; p < ids.size(); ++p) {
    auto [it, inserted] =
        seen.emplace(ids[p], static_cast<int32_t>(e.unique_ids.size()));
    if (inserted) {
      e.unique_ids.push_back(ids[p]);
      occurrences.emplace_back();
    }
    e.indices.push_back(it->second);
    occurrences[it->second].push_back(static_cast<int32_t>(p));
  }
  e.row_offsets.push_back(0);
  for (const std::vector<int32_t>& o : occurrences) {
    e.row_occurrences.insert(e.row_occurrences.end(), o.begin(), o.end());
    e.row_offsets.push_back(static_cast<int32_t>(e.row_occurrences.size()));
  }
  return e;
}

void ExpectMatches(const IdDedup& d, const std::vector<uint64_t>& ids) {
  const Expected e = Reference(ids);
  EXPECT_EQ(ToVector(d.unique_ids()), e.unique_ids);
  EXPECT_EQ(ToVector(d.indices()), e.indices);
  EXPECT_EQ(ToVector(d.row_offsets()), e.row_offsets);
  EXPECT_EQ(ToVector(d.row_occurrences()), e.row_occurrences);
  const EmbeddingBatch b = d.batch();
  EXPECT_EQ(b.num_rows, static_cast<int>(e.unique_ids.size()));
  EXPECT_EQ(b.num_indices, static_cast<int>(ids.size()));
  EXPECT_EQ(b.num_bags + 1, static_cast<int>(d.offsets().size()));
  EXPECT_EQ(b.indices, d.indices().data());
  EXPECT_EQ(b.row_occurrences, d.row_occurrences().data());
}

struct DedupCase {
  std::string name;
  std::vector<uint64_t> ids;
  std::vector<uint64_t> want_unique;
  std::vector<int32_t> want_indices;
};

class IdDedupSingleTest : public TestWithParam<DedupCase> {};

TEST_P(IdDedupSingleTest, FirstOccurrenceOrderAndInverse) {
  const DedupCase& c = GetParam();
  IdDedup d;
  ASSERT_TRUE(d.DedupSingle(c.ids).ok());
  EXPECT_EQ(ToVector(d.unique_ids()), c.want_unique);
  EXPECT_EQ(ToVector(d.indices()), c.want_indices);
  std::vector<int32_t> bags(c.ids.size() + 1);
  for (size_t i = 0; i < bags.size(); ++i) bags[i] = static_cast<int32_t>(i);
  EXPECT_EQ(ToVector(d.offsets()), bags);
  ExpectMatches(d, c.ids);
}

constexpr uint64_t kBig = ~uint64_t{0};

INSTANTIATE_TEST_SUITE_P(
    Cases, IdDedupSingleTest,
    ::testing::Values(
        DedupCase{"empty", {}, {}, {}},
        DedupCase{"distinct", {7, 3, 9}, {7, 3, 9}, {0, 1, 2}},
        DedupCase{"all_same", {5, 5, 5, 5}, {5}, {0, 0, 0, 0}},
        DedupCase{
            "mixed", {4, 0, 4, kBig, 0, 4}, {4, 0, kBig}, {0, 1, 0, 2, 1, 0}},
        // Ids that differ only in high bits must not collide into one.
        DedupCase{"high_bits",
                  {1ULL << 40, 1ULL << 41, 1ULL << 40, 0},
                  {1ULL << 40, 1ULL << 41, 0},
                  {0, 1, 0, 2}}),
    [](const ::testing::TestParamInfo<DedupCase>& info) {
      return info.param.name;
    });

TEST(IdDedupTest, BagsKeepOffsetsAndInverse) {
  // Bags: {1, 2, 1}, {}, {2}, {3, 1}.
  const std::vector<uint64_t> ids = {1, 2, 1, 2, 3, 1};
  const std::vector<int32_t> offsets = {0, 3, 3, 4, 6};
  IdDedup d;
  ASSERT_TRUE(d.DedupBags(ids, offsets).ok());
  EXPECT_EQ(ToVector(d.offsets()), offsets);
  EXPECT_EQ(d.num_bags(), 4);
  EXPECT_EQ(ToVector(d.unique_ids()), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(ToVector(d.row_offsets()), (std::vector<int32_t>{0, 3, 5, 6}));
  EXPECT_EQ(ToVector(d.row_occurrences()),
            (std::vector<int32_t>{0, 2, 5, 1, 3, 4}));
  ExpectMatches(d, ids);
}

TEST(IdDedupTest, RandomBatchesMatchReferenceAndReuseMemory) {
  std::mt19937_64 rng(17);
  IdDedup d;
  // The first batch is the largest, so later ones must not grow anything.
  std::vector<uint64_t> ids(5000);
  std::uniform_int_distribution<uint64_t> any;
  for (uint64_t& id : ids) id = any(rng) % 3000;
  ASSERT_TRUE(d.DedupSingle(ids).ok());
  ExpectMatches(d, ids);
  const size_t capacity = d.table_capacity();
  const int32_t* indices = d.indices().data();
  const int32_t* occurrences = d.row_occurrences().data();
  for (int batch = 0; batch < 20; ++batch) {
    ids.resize(1000 + batch * 100);
    // Some batches draw from a tiny range (long rows), others from all of
    // uint64 (mostly unique).
    const uint64_t range = batch % 2 == 0 ? 50 : 0;
    for (uint64_t& id : ids) id = range == 0 ? any(rng) : any(rng) % range;
    ASSERT_TRUE(d.DedupSingle(ids).ok());
    ExpectMatches(d, ids);
    EXPECT_EQ(d.table_capacity(), capacity);
    EXPECT_EQ(d.indices().data(), indices);
    EXPECT_EQ(d.row_occurrences().data(), occurrences);
  }
}

TEST(IdDedupTest, BadOffsetsAreRejectedAndKeepThePreviousBatch) {
  IdDedup d;
  ASSERT_TRUE(d.DedupSingle({8, 9, 8}).ok());
  const std::vector<uint64_t> ids = {1, 2, 3};
  struct Case {
    std::vector<int32_t> offsets;
    std::string want;
  };
  const std::vector<Case> cases = {
      {{}, "offsets: 0 elements"},
      {{1, 3}, "offsets[0] = 1"},
      {{0, 2, 1, 3}, "offsets[2] = 1 < offsets[1] = 2"},
      {{0, 2}, "offsets[1] = 2 != number of ids 3"},
      {{0, 4}, "offsets[1] = 4 != number of ids 3"},
  };
  for (const Case& c : cases) {
    const absl::Status s = d.DedupBags(ids, c.offsets);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.want;
    EXPECT_NE(s.message().find(c.want), std::string::npos) << s;
    EXPECT_EQ(ToVector(d.unique_ids()), (std::vector<uint64_t>{8, 9}));
    EXPECT_EQ(ToVector(d.indices()), (std::vector<int32_t>{0, 1, 0}));
  }
}

}  // namespace
}  // namespace ps
