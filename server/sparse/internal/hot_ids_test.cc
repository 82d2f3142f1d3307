#include "server/sparse/internal/hot_ids.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace ps {
namespace sparse_internal {
namespace {

// Heavy hitters over a long tail of one-off ids are found (any id with more
// than total/K = 3500/8 pushes is guaranteed), with counts that overestimate
// by at most `error`.
TEST(HotIdsTest, FindsHeavyHittersInALongTail) {
  HotIds hot(8);
  uint64_t tail = 1000;
  for (int round = 0; round < 1000; ++round) {
    hot.Add(1);
    if (round % 2 == 0) hot.Add(2);
    hot.Add(tail++);
    hot.Add(tail++);
  }
  const std::vector<HotId> top = hot.Top();
  ASSERT_EQ(top.size(), 8u);
  EXPECT_EQ(top[0].id, 1u);
  EXPECT_GE(top[0].count, 1000u);
  EXPECT_LE(top[0].count - top[0].error, 1000u);
  bool found = false;
  for (const HotId& h : top) {
    if (h.id != 2) continue;
    found = true;
    EXPECT_GE(h.count, 500u);
    EXPECT_LE(h.count - h.error, 500u);
  }
  EXPECT_TRUE(found);
}

TEST(HotIdsTest, MergeKeepsTheTopAcrossStripes) {
  const std::vector<HotId> merged =
      MergeTop({{5, 3, 0}, {6, 9, 1}, {7, 3, 0}, {8, 1, 0}}, 3);
  ASSERT_EQ(merged.size(), 3u);
  EXPECT_EQ(merged[0].id, 6u);
  EXPECT_EQ(merged[1].id, 5u);  // tie on count: lower id first
  EXPECT_EQ(merged[2].id, 7u);
}

}  // namespace
}  // namespace sparse_internal
}  // namespace ps
