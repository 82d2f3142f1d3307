#include "worker/client/hot_row_cache.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint32_t kDim = 2;
constexpr uint64_t kRowBytes = kDim * 4 + kRowCacheOverheadBytes;

std::unique_ptr<HotRowCache> MakeCache(uint64_t staleness, uint64_t rows,
                                       RowCachePolicy policy) {
  HotRowCacheOptions o;
  o.dim = kDim;
  o.max_staleness = staleness;
  o.capacity_bytes = rows * kRowBytes;
  o.policy = policy;
  absl::StatusOr<std::unique_ptr<HotRowCache>> c = HotRowCache::Create(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(*c);
}

// The "shard": row of id at version v is (id, v).
std::vector<float> ServerRows(const std::vector<uint64_t>& ids, uint64_t v) {
  std::vector<float> rows;
  for (uint64_t id : ids) {
    rows.push_back(static_cast<float>(id));
    rows.push_back(static_cast<float>(v));
  }
  return rows;
}

// One read at `version` through the cache; returns the rows and the ids
// that were pulled.
std::vector<float> ReadThrough(HotRowCache& cache, uint64_t version,
                               const std::vector<uint64_t>& ids,
                               std::vector<uint64_t>* pulled) {
  std::vector<float> rows(ids.size() * kDim, -1.0f);
  RowCacheMisses m;
  cache.Read(version, ids, absl::MakeSpan(rows), &m);
  EXPECT_EQ(m.rows.size(), m.ids.size() * kDim);
  m.rows = ServerRows(m.ids, version);
  cache.Complete(version, m, absl::MakeSpan(rows));
  *pulled = m.ids;
  return rows;
}

TEST(HotRowCacheTest, RefusesBadOptionsNamingTheField) {
  HotRowCacheOptions o;
  o.capacity_bytes = 1 << 20;
  EXPECT_THAT(HotRowCache::Create(o).status().message(), HasSubstr("dim"));
  o.dim = 4;
  o.capacity_bytes = 4 * 4 + kRowCacheOverheadBytes - 1;
  EXPECT_THAT(HotRowCache::Create(o).status().message(),
              HasSubstr("row_cache_bytes"));
  o.capacity_bytes += 1;
  EXPECT_TRUE(HotRowCache::Create(o).ok());
}

TEST(HotRowCacheTest, ARowIsReusedForAtMostMaxStalenessSteps) {
  std::unique_ptr<HotRowCache> cache = MakeCache(2, 16, RowCachePolicy::kLru);
  std::vector<uint64_t> pulled;
  // Version 1: pulled. 2 and 3: from the cache (version 1). 4: pulled again.
  EXPECT_THAT(ReadThrough(*cache, 1, {7}, &pulled), ElementsAre(7, 1));
  EXPECT_THAT(pulled, ElementsAre(7));
  EXPECT_THAT(ReadThrough(*cache, 2, {7}, &pulled), ElementsAre(7, 1));
  EXPECT_TRUE(pulled.empty());
  EXPECT_THAT(ReadThrough(*cache, 3, {7, 8}, &pulled), ElementsAre(7, 1, 8, 3));
  EXPECT_THAT(pulled, ElementsAre(8));
  EXPECT_THAT(ReadThrough(*cache, 4, {8, 7}, &pulled), ElementsAre(8, 3, 7, 4));
  EXPECT_THAT(pulled, ElementsAre(7));
  const HotRowCacheStats s = cache->stats();
  EXPECT_EQ(s.hits, 3u);
  EXPECT_EQ(s.misses, 3u);
  EXPECT_EQ(s.bytes_saved, 3 * (16 + kDim * 4));
  EXPECT_EQ(s.rows, 2u);
  EXPECT_EQ(s.bytes_used, 2 * kRowBytes);
}

TEST(HotRowCacheTest, StalenessZeroPullsEveryRow) {
  std::unique_ptr<HotRowCache> cache = MakeCache(0, 16, RowCachePolicy::kLfu);
  std::vector<uint64_t> pulled;
  for (uint64_t v = 1; v < 5; ++v) {
    EXPECT_THAT(ReadThrough(*cache, v, {3, 1, 3}, &pulled),
                ElementsAre(3, v, 1, v, 3, v));
    EXPECT_THAT(pulled, ElementsAre(3, 1, 3));
  }
  EXPECT_EQ(cache->stats().hits, 0u);
}

TEST(HotRowCacheTest, LruEvictsTheLeastRecentlyRead) {
  std::unique_ptr<HotRowCache> cache = MakeCache(100, 2, RowCachePolicy::kLru);
  std::vector<uint64_t> pulled;
  ReadThrough(*cache, 1, {1, 2}, &pulled);
  ReadThrough(*cache, 2, {1}, &pulled);     // 2 is now the least recent
  ReadThrough(*cache, 3, {3}, &pulled);     // evicts 2
  ReadThrough(*cache, 4, {1, 2}, &pulled);  // 1 cached, 2 pulled (evicts 3)
  EXPECT_THAT(pulled, ElementsAre(2));
  EXPECT_EQ(cache->stats().evictions, 2u);
  EXPECT_EQ(cache->stats().rows, 2u);
}

TEST(HotRowCacheTest, LfuKeepsTheFrequentlyReadRow) {
  std::unique_ptr<HotRowCache> cache = MakeCache(100, 2, RowCachePolicy::kLfu);
  std::vector<uint64_t> pulled;
  ReadThrough(*cache, 1, {1, 2}, &pulled);
  ReadThrough(*cache, 2, {1}, &pulled);
  ReadThrough(*cache, 3, {1}, &pulled);  // 1 read 3 times, 2 once
  ReadThrough(*cache, 4, {2}, &pulled);  // 2 read twice, most recent
  ReadThrough(*cache, 5, {3}, &pulled);  // evicts 2 (fewer reads than 1)
  ReadThrough(*cache, 6, {4}, &pulled);  // evicts 3 (1 read)
  ReadThrough(*cache, 7, {1, 3}, &pulled);
  EXPECT_THAT(pulled, ElementsAre(3));
}

// A long random sequence: every read equals the shard's rows at most
// max_staleness versions old, and the bound holds.
TEST(HotRowCacheTest, RandomReadsStayWithinTheBounds) {
  for (RowCachePolicy policy : {RowCachePolicy::kLru, RowCachePolicy::kLfu}) {
    constexpr uint64_t kStaleness = 3;
    std::unique_ptr<HotRowCache> cache = MakeCache(kStaleness, 50, policy);
    std::mt19937_64 rng(5);
    std::vector<uint64_t> pulled;
    for (uint64_t v = 1; v <= 300; ++v) {
      std::vector<uint64_t> ids(1 + rng() % 40);
      for (uint64_t& id : ids) id = rng() % 120;
      const std::vector<float> rows = ReadThrough(*cache, v, ids, &pulled);
      for (size_t i = 0; i < ids.size(); ++i) {
        ASSERT_EQ(rows[i * kDim], static_cast<float>(ids[i]));
        const float version = rows[i * kDim + 1];
        ASSERT_LE(version, static_cast<float>(v));
        ASSERT_GE(version + kStaleness, static_cast<float>(v));
      }
      ASSERT_LE(cache->stats().rows, 50u);
      ASSERT_LE(cache->stats().bytes_used, 50 * kRowBytes);
    }
    EXPECT_GT(cache->stats().hits, 0u);
    EXPECT_GT(cache->stats().evictions, 0u);
  }
}

}  // namespace
}  // namespace ps
