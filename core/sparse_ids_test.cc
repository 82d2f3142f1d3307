#include "core/sparse_ids.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

// splitmix64 seeded with 0: its first output is MixId64(golden gamma), a
// published reference value independent of this code.
TEST(MixId64Test, MatchesSplitmix64Reference) {
  EXPECT_EQ(MixId64(0x9E3779B97F4A7C15ull), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(MixId64(0), 0u);
}

// Golden values: the partition is an on-wire and on-disk contract. If this
// test fails, the change breaks every running job and checkpoint; revert it.
TEST(ShardForIdTest, GoldenValues) {
  struct Case {
    uint64_t id;
    uint32_t num_shards;
    uint32_t want;
  };
  const Case cases[] = {
      {0x0ull, 3, 0},
      {0x1ull, 2, 0},
      {0x1ull, 8, 2},
      {0x2ull, 4, 3},
      {0x2ull, 16, 13},
      {0x2ull, 1000, 858},
      {0x3ull, 3, 0},
      {0x2Aull, 3, 1},
      {0xF4240ull, 2, 0},
      {0xF4240ull, 8, 3},
      {0xFFFFFFFFull, 3, 1},
      {0x123456789ABCDEFull, 3, 2},
      {0xFFFFFFFFFFFFFFFFull, 4, 2},
      {0xFFFFFFFFFFFFFFFFull, 16, 11},
      {0xFFFFFFFFFFFFFFFFull, 1000, 706},
      {0x10000000000ull, 2, 0},
      {0x10000000000ull, 8, 0},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ShardForId(c.id, c.num_shards), c.want)
        << "id " << c.id << " num_shards " << c.num_shards;
  }
}

TEST(ShardForIdTest, InRangeAndDegenerateCounts) {
  for (uint64_t id = 0; id < 1000; ++id) {
    EXPECT_EQ(ShardForId(id, 1), 0u);
    EXPECT_EQ(ShardForId(id, 0), 0u);
    EXPECT_LT(ShardForId(id * 0x100000001ull, 7), 7u);
    EXPECT_LT(ShardForId(~id, 0xFFFFFFFFu), 0xFFFFFFFFu);
  }
}

// Sequential ids (the common case for remapped vocabularies) and strided ids
// (a field index in the high bits) both spread evenly: every shard's count is
// within 2% of the mean over 1M ids (binomial sd is ~0.3% here).
TEST(ShardForIdTest, Balanced) {
  const uint64_t kIds = 1 << 20;
  for (uint32_t shards : {2u, 3u, 4u, 7u, 16u}) {
    for (uint64_t stride : {uint64_t{1}, uint64_t{1} << 32, uint64_t{1024}}) {
      std::vector<uint64_t> count(shards, 0);
      for (uint64_t i = 0; i < kIds; ++i)
        ++count[ShardForId(i * stride, shards)];
      const double mean = static_cast<double>(kIds) / shards;
      for (uint32_t s = 0; s < shards; ++s) {
        EXPECT_NEAR(count[s], mean, 0.02 * mean)
            << "shards " << shards << " stride " << stride << " shard " << s;
      }
    }
  }
}

// RowOwner maps ShardForId's index into the owners list; no list is every
// shard.
TEST(RowOwnerTest, IndexesTheOwnersList) {
  const std::vector<uint32_t> owners = {0, 2, 5};
  for (uint64_t id = 0; id < 1000; ++id) {
    EXPECT_EQ(RowOwner(id, owners, 8), owners[ShardForId(id, 3)]) << id;
    EXPECT_EQ(RowOwner(id, {}, 8), ShardForId(id, 8)) << id;
  }
}

}  // namespace
}  // namespace ps
