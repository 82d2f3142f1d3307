#include "server/internal/backup_health.h"

#include <cstdint>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace internal {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const absl::Time kT0 = absl::FromUnixSeconds(1000);
const absl::Status kTimeout = absl::DeadlineExceededError("slow");
const absl::Status kRefused = absl::UnavailableError("refused");

BackupHealth Health() {
  return BackupHealth(
      {.deadline = absl::Seconds(1), .max_deadline = absl::Seconds(8)});
}

// Shard 0's view with `failed` failed over.
std::unique_ptr<ReplicaView> View(std::vector<uint32_t> failed) {
  auto view = std::make_unique<ReplicaView>(/*self=*/0);
  SetReplicaViewRequest req;
  req.set_epoch(1);
  for (uint32_t f : failed) req.add_failed(f);
  EXPECT_TRUE(view->Set(req).ok());
  return view;
}

TEST(BackupHealthTest, AnAnsweringBackupKeepsTheDefaultDeadline) {
  BackupHealth h = Health();
  EXPECT_EQ(h.DeadlineFor(1), absl::Seconds(1));
  h.Answered(1);
  EXPECT_EQ(h.DeadlineFor(1), absl::Seconds(1));
  EXPECT_THAT(h.Lagging(absl::ZeroDuration(), kT0, *View({})), IsEmpty());
}

TEST(BackupHealthTest, TimeoutsDoubleTheDeadlineUpToTheMax) {
  struct Case {
    absl::Duration used;
    absl::Duration next;
    bool lagging;  // with lag 0
  };
  const std::vector<Case> cases = {
      {absl::Seconds(1), absl::Seconds(2), false},
      {absl::Seconds(2), absl::Seconds(4), false},
      {absl::Seconds(4), absl::Seconds(8), false},
      {absl::Seconds(8), absl::Seconds(8), true},  // the full max: gone
  };
  BackupHealth h = Health();
  const std::unique_ptr<ReplicaView> view = View({});
  for (const Case& c : cases) {
    h.Failed(1, kTimeout, c.used, kT0);
    EXPECT_EQ(h.DeadlineFor(1), c.next) << c.used;
    EXPECT_EQ(h.Lagging(absl::ZeroDuration(), kT0, *view).size(),
              c.lagging ? 1u : 0u)
        << c.used;
  }
  EXPECT_EQ(h.DeadlineFor(2), absl::Seconds(1));  // each backup its own
}

TEST(BackupHealthTest, AnOlderForwardOutOfTimeDoesNotLowerTheDeadline) {
  BackupHealth h = Health();
  h.Failed(1, kTimeout, absl::Seconds(1), kT0);
  h.Failed(1, kTimeout, absl::Seconds(2), kT0);
  ASSERT_EQ(h.DeadlineFor(1), absl::Seconds(4));
  // Sent with 1 s before the doublings, it ended after them.
  h.Failed(1, kTimeout, absl::Seconds(1), kT0);
  EXPECT_EQ(h.DeadlineFor(1), absl::Seconds(4));
}

TEST(BackupHealthTest, AMaxBelowTheDeadlineCountsAsTheDeadline) {
  BackupHealth h(
      {.deadline = absl::Seconds(2), .max_deadline = absl::Seconds(1)});
  h.Failed(1, kTimeout, absl::Seconds(2), kT0);
  EXPECT_EQ(h.DeadlineFor(1), absl::Seconds(2));
  EXPECT_THAT(h.Lagging(absl::ZeroDuration(), kT0, *View({})), ElementsAre(1));
}

TEST(BackupHealthTest, AFailureOtherThanATimeoutIsLaggingAfterTheLag) {
  BackupHealth h = Health();
  const std::unique_ptr<ReplicaView> view = View({});
  h.Failed(1, kRefused, absl::Seconds(1), kT0);
  EXPECT_EQ(h.DeadlineFor(1), absl::Seconds(1));  // not slow: no doubling
  // Failing since the first failure, not the last.
  h.Failed(1, kRefused, absl::Seconds(1), kT0 + absl::Seconds(3));
  EXPECT_THAT(h.Lagging(absl::Seconds(5), kT0 + absl::Seconds(4), *view),
              IsEmpty());
  EXPECT_THAT(h.Lagging(absl::Seconds(5), kT0 + absl::Seconds(5), *view),
              ElementsAre(1));
}

TEST(BackupHealthTest, ATimeoutAfterARefusalIsNotLaggingUntilTheMax) {
  BackupHealth h = Health();
  const std::unique_ptr<ReplicaView> view = View({});
  h.Failed(1, kRefused, absl::Seconds(1), kT0);
  ASSERT_THAT(h.Lagging(absl::ZeroDuration(), kT0, *view), ElementsAre(1));
  h.Failed(1, kTimeout, absl::Seconds(1), kT0);
  EXPECT_THAT(h.Lagging(absl::ZeroDuration(), kT0, *view), IsEmpty());
}

TEST(BackupHealthTest, AnAnswerEndsTheFailingAndHalvesTheDeadline) {
  BackupHealth h = Health();
  const std::unique_ptr<ReplicaView> view = View({});
  h.Failed(1, kTimeout, absl::Seconds(4), kT0);
  h.Failed(1, kTimeout, absl::Seconds(8), kT0);
  ASSERT_THAT(h.Lagging(absl::ZeroDuration(), kT0, *view), ElementsAre(1));
  h.Answered(1);
  EXPECT_THAT(h.Lagging(absl::ZeroDuration(), kT0, *view), IsEmpty());
  EXPECT_EQ(h.DeadlineFor(1), absl::Seconds(4));
  h.Answered(1);
  h.Answered(1);
  h.Answered(1);
  EXPECT_EQ(h.DeadlineFor(1), absl::Seconds(1));  // not below the default
  // Failing again: since the new failure.
  h.Failed(1, kRefused, absl::Seconds(1), kT0 + absl::Seconds(10));
  EXPECT_THAT(h.Lagging(absl::Seconds(5), kT0 + absl::Seconds(14), *view),
              IsEmpty());
}

TEST(BackupHealthTest, ABackupTheViewFailedIsNotReported) {
  BackupHealth h = Health();
  h.Failed(1, kRefused, absl::Seconds(1), kT0);
  h.Failed(2, kRefused, absl::Seconds(1), kT0);
  EXPECT_THAT(h.Lagging(absl::ZeroDuration(), kT0, *View({})),
              ElementsAre(1, 2));
  EXPECT_THAT(h.Lagging(absl::ZeroDuration(), kT0, *View({1})), ElementsAre(2));
}

TEST(BackupHealthTest, ForgetDropsOneBackupOrAllForThisShard) {
  BackupHealth h = Health();
  const std::unique_ptr<ReplicaView> view = View({});
  for (uint32_t b : {1u, 2u, 3u}) h.Failed(b, kTimeout, absl::Seconds(8), kT0);
  h.Forget(2, /*self=*/0);
  EXPECT_THAT(h.Lagging(absl::ZeroDuration(), kT0, *view), ElementsAre(1, 3));
  EXPECT_EQ(h.DeadlineFor(2), absl::Seconds(1));
  EXPECT_EQ(h.DeadlineFor(3), absl::Seconds(8));
  h.Forget(0, /*self=*/0);
  EXPECT_THAT(h.Lagging(absl::ZeroDuration(), kT0, *view), IsEmpty());
  EXPECT_EQ(h.DeadlineFor(3), absl::Seconds(1));
}

}  // namespace
}  // namespace internal
}  // namespace ps
