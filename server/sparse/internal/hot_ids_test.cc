#include "server/sparse/internal/hot_ids.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace sparse_internal {
namespace {

std::vector<uint64_t> Ids(const std::vector<HotId>& v) {
  std::vector<uint64_t> ids;
  for (const HotId& h : v) ids.push_back(h.id);
  return ids;
}

TEST(TopHotIdsTest, KeepsTheKHottestWithTiesToTheLowerId) {
  TopHotIds top(3);
  top.Offer(5, 3);
  top.Offer(6, 9);
  top.Offer(7, 3);
  top.Offer(8, 1);
  top.Offer(4, 3);  // ties 5 and 7 at 3 pushes, lower id: in, 7 out
  const std::vector<HotId> got = std::move(top).Take();
  EXPECT_EQ(Ids(got), (std::vector<uint64_t>{6, 4, 5}));
  EXPECT_EQ(got[0].pushes, 9u);
  EXPECT_EQ(got[2].pushes, 3u);
}

TEST(TopHotIdsTest, FewerThanKOrZero) {
  TopHotIds two(5);
  two.Offer(1, 1);
  two.Offer(2, 2);
  EXPECT_EQ(Ids(std::move(two).Take()), (std::vector<uint64_t>{2, 1}));
  TopHotIds none(0);
  none.Offer(1, 100);
  EXPECT_TRUE(std::move(none).Take().empty());
}

// Whatever the offer order, the result is the sorted prefix of everything.
TEST(TopHotIdsTest, MatchesAFullSortOnRandomInput) {
  std::mt19937_64 rng(42);
  std::vector<HotId> all;
  for (uint64_t id = 0; id < 5000; ++id) all.push_back({id, rng() % 300});
  std::shuffle(all.begin(), all.end(), rng);
  TopHotIds top(64);
  for (const HotId& h : all) top.Offer(h.id, h.pushes);
  std::sort(all.begin(), all.end(), Hotter);
  all.resize(64);
  const std::vector<HotId> got = std::move(top).Take();
  EXPECT_EQ(Ids(got), Ids(all));
}

}  // namespace
}  // namespace sparse_internal
}  // namespace ps
