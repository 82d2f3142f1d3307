#include "server/internal/held_pushes.h"

#include <atomic>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/internal/job.h"

namespace ps {
namespace internal {
namespace {

// What happened to each held push: "resumed" or the status it was answered.
struct Log {
  std::vector<std::string> events;
  HeldPush Push(uint64_t step, absl::Time until) {
    return HeldPush{
        step, until,
        [this, step] { events.push_back("resumed " + std::to_string(step)); },
        [this, step](absl::Status s) {
          events.push_back("answered " + std::to_string(step) + ": " +
                           std::string(s.message()));
        },
        absl::UnavailableError("paused")};
  }
};

const absl::Time kLater = absl::Now() + absl::Hours(1);

TEST(HeldPushesTest, HeldWhilePausedThenResumedOnce) {
  std::atomic<uint64_t> pause{2};
  HeldPushes held;
  Log log;
  EXPECT_EQ(held.Hold(log.Push(1, kLater), BSP, pause), HeldPushes::kResume);
  EXPECT_EQ(held.Hold(log.Push(2, kLater), BSP, pause), HeldPushes::kHeld);
  EXPECT_EQ(held.Hold(log.Push(3, kLater), BSP, pause), HeldPushes::kHeld);
  EXPECT_EQ(held.size(), 2u);
  EXPECT_TRUE(log.events.empty());  // kResume: the caller runs it itself
  pause.store(kNotPaused);
  held.ResumeAll();
  EXPECT_EQ(log.events, (std::vector<std::string>{"resumed 2", "resumed 3"}));
  held.ResumeAll();  // nothing twice
  EXPECT_EQ(log.events.size(), 2u);
  // ASP: every push is paused while a pause is set, none after.
  pause.store(7);
  EXPECT_EQ(held.Hold(log.Push(1, kLater), ASP, pause), HeldPushes::kHeld);
  pause.store(kNotPaused);
  EXPECT_EQ(held.Hold(log.Push(1, kLater), ASP, pause), HeldPushes::kResume);
}

TEST(HeldPushesTest, CloseAnswersAllAndHoldsNoMore) {
  std::atomic<uint64_t> pause{0};
  HeldPushes held;
  Log log;
  ASSERT_EQ(held.Hold(log.Push(4, kLater), BSP, pause), HeldPushes::kHeld);
  held.Close(absl::AbortedError("re-placed"));
  EXPECT_EQ(log.events, (std::vector<std::string>{"answered 4: re-placed"}));
  EXPECT_EQ(held.Hold(log.Push(5, kLater), BSP, pause), HeldPushes::kAnswer);
  held.ResumeAll();
  EXPECT_EQ(log.events.size(), 1u);
}

TEST(HeldPushesTest, ExpireAnswersOnlyThoseDueWithTheirPausedError) {
  std::atomic<uint64_t> pause{0};
  HeldPushes held;
  Log log;
  const absl::Time now = absl::Now();
  EXPECT_EQ(held.Hold(log.Push(1, now - absl::Seconds(1)), BSP, pause),
            HeldPushes::kAnswer);  // already due: not held
  ASSERT_EQ(held.Hold(log.Push(2, now + absl::Seconds(1)), BSP, pause),
            HeldPushes::kHeld);
  ASSERT_EQ(held.Hold(log.Push(3, now + absl::Seconds(3)), BSP, pause),
            HeldPushes::kHeld);
  held.Expire(now + absl::Seconds(2));
  EXPECT_EQ(log.events, (std::vector<std::string>{"answered 2: paused"}));
  EXPECT_EQ(held.size(), 1u);
  held.Expire(now + absl::Seconds(3));
  EXPECT_EQ(log.events.back(), "answered 3: paused");
  EXPECT_EQ(held.size(), 0u);
}

}  // namespace
}  // namespace internal
}  // namespace ps
