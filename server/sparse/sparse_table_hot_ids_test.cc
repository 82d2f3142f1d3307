// Stats::hottest: exact push counts per stored row, so the reported ids are
// the true hottest even over a long tail of distinct ids (a bounded sketch
// of K counters cannot hold them there: their frequency is far below
// total / K).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/sparse_ids.h"
#include "gtest/gtest.h"
#include "server/sparse/sparse_table.h"
#include "server/sparse/testing/sparse_table_test_util.h"

namespace ps {
namespace {

using sparse_test::CountingSgd;
using sparse_test::MustCreate;
using sparse_test::PushConst;
using sparse_test::SmallOptions;

// Ranks 1..n with P(r) proportional to 1 / r^s, drawn by inverse CDF from a
// fixed-seed generator (its own uniform mapping: same stream everywhere).
class Zipf {
 public:
  Zipf(size_t n, double s, uint64_t seed) : rng_(seed), cdf_(n) {
    double sum = 0;
    for (size_t r = 0; r < n; ++r) cdf_[r] = sum += 1.0 / std::pow(r + 1, s);
    for (double& c : cdf_) c /= sum;
  }
  uint64_t Next() {
    const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
    return std::upper_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin() + 1;
  }

 private:
  std::mt19937_64 rng_;
  std::vector<double> cdf_;
};

std::vector<HotId> TrueTop(const std::unordered_map<uint64_t, uint64_t>& n,
                           size_t k) {
  std::vector<HotId> all;
  for (const auto& [id, pushes] : n) all.push_back({id, pushes});
  std::sort(all.begin(), all.end(), [](const HotId& a, const HotId& b) {
    return a.pushes != b.pushes ? a.pushes > b.pushes : a.id < b.id;
  });
  all.resize(std::min(all.size(), k));
  return all;
}

// 20000 pushes of 16 Zipf(1.0) draws over 2^20 ranks (ids scrambled): about
// 10^5 distinct ids, the 10th hottest in ~1/10 of the pushes and ~0.6% of
// the draws. Admission counts its own pushes into the row's.
TEST(SparseTableHotIdsTest, ZipfStreamReportsTheExactTopIds) {
  for (uint32_t admission : {1u, 3u}) {
    SCOPED_TRACE(admission);
    SparseTable::Options o = SmallOptions();
    o.num_stripes = 64;
    o.admission_count = admission;
    o.hot_ids = 10;
    auto t = MustCreate(o);
    CountingSgd sgd(o.dim);
    Zipf zipf(1 << 20, 1.0, 2024);
    std::unordered_map<uint64_t, uint64_t> truth;  // pushes per id
    for (uint64_t step = 0; step < 20000; ++step) {
      std::vector<uint64_t> ids(16);
      for (uint64_t& id : ids) id = MixId64(zipf.Next());
      ASSERT_TRUE(PushConst(*t, ids, 0.01f, step, sgd).ok());
      // A push counts once per id however often the id repeats in it.
      for (uint64_t id : std::unordered_set<uint64_t>(ids.begin(), ids.end()))
        ++truth[id];
    }
    ASSERT_GT(truth.size(), 50000u);
    const std::vector<HotId> want = TrueTop(truth, o.hot_ids);
    const std::vector<HotId> got = t->GetStats().hottest;
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].id, want[i].id) << "rank " << i;
      EXPECT_EQ(got[i].pushes, want[i].pushes) << "rank " << i;
    }
    EXPECT_EQ(got[0].id, MixId64(1));  // rank 1 is the hottest
  }
}

TEST(SparseTableHotIdsTest, EvictedRowsStartOverAndPendingIdsAreNotRows) {
  SparseTable::Options o = SmallOptions();
  o.admission_count = 2;
  o.ttl_steps = 10;
  auto t = MustCreate(o);
  CountingSgd sgd(o.dim);
  for (uint64_t step = 0; step < 5; ++step) {
    ASSERT_TRUE(PushConst(*t, {7}, 1.0f, step, sgd).ok());
  }
  ASSERT_TRUE(PushConst(*t, {8}, 1.0f, 5, sgd).ok());  // pending: not a row
  std::vector<HotId> hot = t->GetStats().hottest;
  ASSERT_EQ(hot.size(), 1u);
  EXPECT_EQ(hot[0].id, 7u);
  EXPECT_EQ(hot[0].pushes, 5u);
  EXPECT_EQ(t->EvictExpired(14), 1u);  // 7 last pushed at step 4
  ASSERT_TRUE(PushConst(*t, {7}, 1.0f, 20, sgd).ok());
  ASSERT_TRUE(PushConst(*t, {7}, 1.0f, 21, sgd).ok());
  hot = t->GetStats().hottest;
  ASSERT_EQ(hot.size(), 1u);
  EXPECT_EQ(hot[0].pushes, 2u);
}

TEST(SparseTableHotIdsTest, ZeroHotIdsReportsNone) {
  SparseTable::Options o = SmallOptions();
  o.hot_ids = 0;
  auto t = MustCreate(o);
  CountingSgd sgd(o.dim);
  ASSERT_TRUE(PushConst(*t, {1, 2, 3}, 1.0f, 0, sgd).ok());
  EXPECT_TRUE(t->GetStats().hottest.empty());
}

}  // namespace
}  // namespace ps
