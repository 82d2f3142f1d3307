#include "server/coordinator/data_plan.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;

// 100 examples, batches of 10, 2 epochs, rank slots for 4.
JobSpec Spec(DataRescale rescale) {
  JobSpec spec;
  spec.mutable_model()->mutable_mlp()->set_input_dim(4);
  spec.mutable_data()->set_batch_size(10);
  spec.mutable_data()->set_epochs(2);
  spec.set_num_workers(2);
  spec.set_max_workers(4);
  spec.set_data_rescale(rescale);
  return spec;
}

struct Asker {
  DataPlan plan;
  JobSpec spec;
  GetDataPlanResponse response;
  absl::StatusOr<PlanAnswer> Ask(uint64_t step, uint32_t rank,
                                 const std::vector<uint32_t>& members,
                                 uint64_t examples = 100) {
    return AnswerDataPlan(plan, spec, step, examples, rank, members, &response);
  }
};

TEST(DataPlanTest, EpochRescaleChangesTheRanksAtTheEpochBoundaryOnly) {
  Asker a{DataPlan(), Spec(DATA_RESCALE_EPOCH), {}};
  ASSERT_EQ(*a.Ask(0, 0, {0, 1}), PlanAnswer::kSealed);
  // 100 / (2 x 10) = 5 steps in epoch 0.
  EXPECT_EQ(a.response.planned_until(), 5u);
  EXPECT_THAT(a.response.segment().ranks(), ElementsAre(0, 1));
  // A joiner (rank 2) waits; a member's ask inside the epoch is answered.
  EXPECT_EQ(*a.Ask(5, 2, {0, 1, 2}), PlanAnswer::kNotYet);
  EXPECT_EQ(*a.Ask(3, 1, {0, 1, 2}), PlanAnswer::kAnswered);
  EXPECT_EQ(a.response.segment().start_step(), 0u);
  // Step 5 starts epoch 1 over 3 ranks: 100 / 30 = 3 steps.
  ASSERT_EQ(*a.Ask(5, 1, {0, 1, 2}), PlanAnswer::kSealed);
  EXPECT_EQ(a.response.segment().epoch(), 1u);
  EXPECT_EQ(a.response.segment().offset(), 0u);
  EXPECT_THAT(a.response.segment().ranks(), ElementsAre(0, 1, 2));
  EXPECT_EQ(a.response.planned_until(), 8u);
  EXPECT_EQ(*a.Ask(5, 2, {0, 1, 2}), PlanAnswer::kAnswered);
  // Epoch 2 is past data.epochs: done, for every later ask too.
  ASSERT_EQ(*a.Ask(8, 0, {0, 1, 2}), PlanAnswer::kAnswered);
  EXPECT_TRUE(a.response.done());
  ASSERT_EQ(*a.Ask(8, 2, {0}), PlanAnswer::kAnswered);
  EXPECT_TRUE(a.response.done());
}

TEST(DataPlanTest, AtOnceRescaleSplitsTheRestOfTheEpoch) {
  Asker a{DataPlan(), Spec(DATA_RESCALE_AT_ONCE), {}};
  ASSERT_EQ(*a.Ask(0, 0, {0, 1}), PlanAnswer::kSealed);
  EXPECT_EQ(a.response.planned_until(), 1u);
  ASSERT_EQ(*a.Ask(1, 1, {0, 1}), PlanAnswer::kAnswered);
  EXPECT_EQ(a.response.segment().start_step(), 0u);
  // Step 2: 40 examples read; 60 left over 3 ranks = 2 steps.
  ASSERT_EQ(*a.Ask(2, 0, {0, 1, 2}), PlanAnswer::kSealed);
  EXPECT_EQ(a.response.segment().offset(), 40u);
  EXPECT_EQ(a.response.segment().epoch(), 0u);
  ASSERT_EQ(*a.Ask(3, 0, {0, 1, 2}), PlanAnswer::kAnswered);
  // Step 4: 100 read, epoch 1 from its start.
  ASSERT_EQ(*a.Ask(4, 2, {0, 1, 2}), PlanAnswer::kSealed);
  EXPECT_EQ(a.response.segment().epoch(), 1u);
  EXPECT_EQ(a.response.segment().offset(), 0u);
  // Shrinking to 1 rank at step 5: 30 read, 70 left for 7 steps.
  ASSERT_EQ(*a.Ask(5, 0, {0}), PlanAnswer::kSealed);
  EXPECT_EQ(a.response.segment().offset(), 30u);
  EXPECT_THAT(a.response.segment().ranks(), ElementsAre(0));
  // A rank left out may not seal.
  EXPECT_EQ(*a.Ask(6, 2, {0}), PlanAnswer::kNotYet);
}

TEST(DataPlanTest, BadAsksChangeNothing) {
  Asker a{DataPlan(), Spec(DATA_RESCALE_EPOCH), {}};
  ASSERT_EQ(*a.Ask(0, 0, {0, 1}), PlanAnswer::kSealed);
  const std::string before = a.plan.SerializeAsString();
  EXPECT_EQ(a.Ask(0, 0, {0, 1}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.Ask(0, 0, {0, 1}, 99).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(a.Ask(6, 0, {0, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.plan.SerializeAsString(), before);
  // 11 ranks x 10 > 100 examples.
  Asker big{DataPlan(), Spec(DATA_RESCALE_EPOCH), {}};
  EXPECT_EQ(big.Ask(0, 0, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ps
