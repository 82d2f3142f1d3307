#include "server/coordinator/progress_history.h"

#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

Progress At(uint64_t step, float loss = 1.0f) {
  Progress p;
  p.set_step(step);
  p.set_loss(loss);
  return p;
}

std::vector<uint64_t> Steps(const std::vector<Progress>& points) {
  std::vector<uint64_t> steps;
  for (const Progress& p : points) steps.push_back(p.step());
  return steps;
}

TEST(ProgressHistoryTest, KeepsPointsInStepOrderPerJob) {
  ProgressHistory history(100);
  history.Add("a", At(10, 2.0f));
  history.Add("b", At(5));
  history.Add("a", At(20, 1.5f));
  EXPECT_EQ(Steps(history.Get("a")), (std::vector<uint64_t>{10, 20}));
  EXPECT_FLOAT_EQ(history.Get("a")[1].loss(), 1.5f);
  EXPECT_EQ(Steps(history.Get("b")), (std::vector<uint64_t>{5}));
  EXPECT_TRUE(history.Get("unknown").empty());
}

TEST(ProgressHistoryTest, RepeatedStepReplacesTheTail) {
  ProgressHistory history(100);
  for (uint64_t s : {10, 20, 30}) history.Add("a", At(s));
  history.Add("a", At(20, 0.5f));  // a rejoined leader repeats step 20
  EXPECT_EQ(Steps(history.Get("a")), (std::vector<uint64_t>{10, 20}));
  EXPECT_FLOAT_EQ(history.Get("a")[1].loss(), 0.5f);
}

TEST(ProgressHistoryTest, ThinsTheOlderHalfAndKeepsTheSpan) {
  constexpr size_t kMax = 16;
  ProgressHistory history(kMax);
  for (uint64_t s = 1; s <= 1000; ++s) history.Add("a", At(s));
  const std::vector<uint64_t> steps = Steps(history.Get("a"));
  ASSERT_LE(steps.size(), kMax);
  EXPECT_EQ(steps.front(), 1u);    // the first point stays
  EXPECT_EQ(steps.back(), 1000u);  // the newest too
  // The newest steps are at full detail.
  EXPECT_EQ(steps[steps.size() - 2], 999u);
  for (size_t i = 1; i < steps.size(); ++i) EXPECT_LT(steps[i - 1], steps[i]);
}

TEST(ProgressHistoryTest, SetSortsAndBounds) {
  ProgressHistory history(8);
  std::vector<Progress> points;
  for (uint64_t s = 40; s > 0; --s) points.push_back(At(s));
  history.Set("a", points);
  const std::vector<uint64_t> steps = Steps(history.Get("a"));
  ASSERT_LE(steps.size(), 8u);
  EXPECT_EQ(steps.front(), 1u);
  EXPECT_EQ(steps.back(), 40u);
}

}  // namespace
}  // namespace ps
