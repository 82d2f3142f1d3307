#include "server/internal/quorum.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace internal {
namespace {

TEST(BspQuorumTest, AllOrAllButBackupsAndAtLeastOne) {
  struct Case {
    uint32_t members, backups, want;
  };
  for (const Case& c : std::vector<Case>{{4, 0, 4},
                                         {4, 1, 3},
                                         {4, 3, 1},
                                         {4, 4, 1},
                                         {4, 9, 1},
                                         {1, 0, 1},
                                         {0, 0, 1},
                                         {0, 2, 1}}) {
    EXPECT_EQ(BspQuorum(c.members, c.backups), c.want)
        << c.members << " members, " << c.backups << " backups";
  }
}

TEST(BspQuorumTest, ReachedNeedsTheQuorumAndOnePush) {
  struct Case {
    uint32_t members, arrived, backups;
    bool want;
  };
  for (const Case& c : std::vector<Case>{{3, 3, 0, true},
                                         {3, 2, 0, false},
                                         {3, 2, 1, true},
                                         {3, 1, 1, false},
                                         {3, 1, 5, true},
                                         {3, 0, 5, false},
                                         {0, 0, 0, false}}) {
    EXPECT_EQ(BspQuorumReached(c.members, c.arrived, c.backups), c.want)
        << c.members << " members, " << c.arrived << " arrived, " << c.backups
        << " backups";
  }
}

TEST(SlowestActiveTest, LowestStepOfTheActiveRanks) {
  const std::vector<uint8_t> active = {1, 0, 1, 1};
  const std::vector<uint64_t> steps = {7, 2, 5, 9};
  auto is_active = [&](uint32_t r) { return active[r] != 0; };
  auto step = [&](uint32_t r) { return steps[r]; };
  EXPECT_EQ(SlowestActive(4, is_active, step), 5u);
  // Only the first `num_workers` ranks count.
  EXPECT_EQ(SlowestActive(1, is_active, step), 7u);
}

TEST(SlowestActiveTest, ZeroWithoutActiveRanks) {
  const std::vector<uint64_t> steps = {3, 4};
  auto none = [](uint32_t) { return false; };
  auto step = [&](uint32_t r) { return steps[r]; };
  EXPECT_EQ(SlowestActive(2, none, step), 0u);
  EXPECT_EQ(SlowestActive(
                0, [](uint32_t) { return true; }, step),
            0u);
}

TEST(SlowestActiveTest, ReadsStepsOfActiveRanksOnly) {
  std::vector<uint32_t> read;
  auto step = [&](uint32_t r) {
    read.push_back(r);
    return uint64_t{1};
  };
  SlowestActive(
      3, [](uint32_t r) { return r != 1; }, step);
  EXPECT_EQ(read, (std::vector<uint32_t>{0, 2}));
}

}  // namespace
}  // namespace internal
}  // namespace ps
