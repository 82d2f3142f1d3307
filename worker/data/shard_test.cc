#include "worker/data/shard.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

struct SplitCase {
  size_t size;
  uint32_t workers;
  uint32_t batch;
};

class ShardSplitTest : public ::testing::TestWithParam<SplitCase> {};

TEST_P(ShardSplitTest, SharesAreDisjointAndCoverTheSet) {
  const SplitCase c = GetParam();
  std::vector<int> seen(c.size);
  for (uint32_t r = 0; r < c.workers; ++r) {
    absl::StatusOr<ShardPlan> plan =
        ShardPlan::Create(c.size, r, c.workers, c.batch, /*seed=*/42);
    ASSERT_TRUE(plan.ok()) << plan.status();
    // Identical on every rank: BSP needs every worker at every step.
    EXPECT_EQ(plan->steps_per_epoch(), c.size / c.workers / c.batch);
    const size_t n = plan->share().size();
    EXPECT_TRUE(n == c.size / c.workers || n == c.size / c.workers + 1) << n;
    EXPECT_GE(n, plan->steps_per_epoch() * c.batch);
    for (uint32_t i : plan->share()) ++seen[i];
  }
  for (size_t i = 0; i < c.size; ++i) ASSERT_EQ(seen[i], 1) << "example " << i;
}

INSTANTIATE_TEST_SUITE_P(Sizes, ShardSplitTest,
                         ::testing::Values(SplitCase{1000, 1, 32},
                                           SplitCase{1000, 3, 10},
                                           SplitCase{1001, 4, 1},
                                           SplitCase{7, 7, 1},
                                           SplitCase{60000, 5, 64}));

TEST(ShardPlanTest, SplitDependsOnTheSeedOnly) {
  absl::StatusOr<ShardPlan> a = ShardPlan::Create(500, 1, 3, 8, 1);
  absl::StatusOr<ShardPlan> b = ShardPlan::Create(500, 1, 3, 16, 1);
  absl::StatusOr<ShardPlan> c = ShardPlan::Create(500, 1, 3, 8, 2);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->share(), b->share());
  EXPECT_NE(a->share(), c->share());
}

TEST(ShardPlanTest, EpochOrderIsASeededPermutationOfTheShare) {
  absl::StatusOr<ShardPlan> plan = ShardPlan::Create(1000, 2, 4, 10, 9);
  absl::StatusOr<ShardPlan> other_rank = ShardPlan::Create(1000, 3, 4, 10, 9);
  ASSERT_TRUE(plan.ok() && other_rank.ok());
  std::vector<uint32_t> e0, e0_again, e1;
  plan->EpochOrder(0, &e0);
  plan->EpochOrder(0, &e0_again);
  plan->EpochOrder(1, &e1);
  EXPECT_EQ(e0, e0_again);
  EXPECT_NE(e0, e1);
  EXPECT_NE(e0, plan->share());
  for (std::vector<uint32_t> order : {e0, e1}) {
    std::vector<uint32_t> share = plan->share();
    std::sort(order.begin(), order.end());
    std::sort(share.begin(), share.end());
    EXPECT_EQ(order, share);
  }
  // Another rank shuffles with its own seed (and its own examples).
  std::vector<uint32_t> r3;
  other_rank->EpochOrder(0, &r3);
  std::vector<uint32_t> positions0, positions3;
  for (uint32_t i : e0) {
    positions0.push_back(
        std::find(plan->share().begin(), plan->share().end(), i) -
        plan->share().begin());
  }
  for (uint32_t i : r3) {
    positions3.push_back(
        std::find(other_rank->share().begin(), other_rank->share().end(), i) -
        other_rank->share().begin());
  }
  EXPECT_NE(positions0, positions3);
}

TEST(ShardPlanTest, RejectsBadArgumentsNamingTheField) {
  struct Case {
    size_t size;
    uint32_t rank, workers, batch;
    std::string field;
  };
  for (const Case& c : std::vector<Case>{
           {100, 0, 0, 10, "num_workers"},
           {100, 2, 2, 10, "rank"},
           {100, 0, 2, 0, "data.batch_size"},
           {100, 0, 3, 34, "data.batch_size: 34 is larger"},
           {0, 0, 1, 1, "data.batch_size"},
       }) {
    const absl::Status s =
        ShardPlan::Create(c.size, c.rank, c.workers, c.batch, 1).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr(c.field));
  }
}

TEST(StepsPerEpochTest, FloorOfFloor) {
  EXPECT_EQ(StepsPerEpoch(60000, 1, 64), 937u);
  EXPECT_EQ(StepsPerEpoch(60000, 7, 64), 133u);  // 8571 / 64
  EXPECT_EQ(StepsPerEpoch(100, 3, 11), 3u);      // 33 / 11
  EXPECT_EQ(StepsPerEpoch(100, 0, 11), 0u);
  EXPECT_EQ(StepsPerEpoch(100, 3, 0), 0u);
}

}  // namespace
}  // namespace ps
