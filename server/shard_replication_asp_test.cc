// Shard tests, replicated ASP jobs (JobSpec.replication = 2) on two
// in-process shards (server/testing/replication_fixture.h): a push waits
// for its own chunks' backups, a backup that takes nothing is reported
// lagging, a slow one gets longer deadlines, a rejoining shard forgets its
// old forwards' failures.
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "server/testing/replication_fixture.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace shard_test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Heartbeats `view` to `shard` until its answer names a lagging backup
// (at most kWait); that answer.
SetReplicaViewResponse AwaitLagging(Shard& shard,
                                    const SetReplicaViewRequest& view) {
  SetReplicaViewResponse resp;
  const absl::Time deadline = absl::Now() + kWait;
  while (resp.lagging().empty() && absl::Now() < deadline) {
    resp.Clear();
    EXPECT_TRUE(shard.SetReplicaView(view, &resp).ok());
    absl::SleepFor(absl::Milliseconds(1));  // a poll, not a synchronization
  }
  return resp;
}

// ASP: each push waits for its own chunks' backups (a BSP answer would wait
// for the chunks shard 0 is promoted to as well).
TEST_F(ShardReplicationAspTest, ABackupThatTakesNoForwardIsReportedLagging) {
  // Shard 1 answers the coordinator but takes no forward from shard 0.
  Hold(true);
  auto call = StartPushPull(
      *shards_[0], PushRequestFor<PushPullRequest>(reg_, 0, 0, {0, 2}, 0));
  SetReplicaViewRequest view = View(1, {});
  view.set_lag_ms(1);
  SetReplicaViewResponse resp = AwaitLagging(*shards_[0], view);
  EXPECT_THAT(resp.lagging(), ::testing::ElementsAre(1u));
  // Without lag_ms nothing is reported; once failed over, neither.
  view.set_lag_ms(0);
  resp.Clear();
  ASSERT_TRUE(shards_[0]->SetReplicaView(view, &resp).ok());
  EXPECT_TRUE(resp.lagging().empty());
  view = View(2, {1});
  view.set_lag_ms(1);
  resp.Clear();
  ASSERT_TRUE(shards_[0]->SetReplicaView(view, &resp).ok());
  EXPECT_TRUE(resp.lagging().empty());
  // Dropped from the acknowledgement set: the step is answered.
  ASSERT_TRUE(call->done.WaitForNotificationWithTimeout(kWait));
  EXPECT_TRUE(call->status.ok()) << call->status;
  EXPECT_GE(StatsOf(*shards_[0], "j").replica_drops(), 1u);
  Hold(false);
}

// A shard told it rejoins (it was failed over; the coordinator reached it
// again) reports none of its old forwards' failures: they were a fenced
// primary's, and would fail its live backup over.
TEST_F(ShardReplicationAspTest, ARejoiningShardForgetsItsForwardsFailures) {
  Hold(true);
  auto call = StartPushPull(
      *shards_[0], PushRequestFor<PushPullRequest>(reg_, 0, 0, {0, 2}, 0));
  SetReplicaViewRequest view = View(1, {});
  view.set_lag_ms(1);
  SetReplicaViewResponse resp = AwaitLagging(*shards_[0], view);
  ASSERT_THAT(resp.lagging(), ::testing::ElementsAre(1u));
  view = View(2, {});
  view.add_joining(0);
  view.set_lag_ms(1);
  resp.Clear();
  ASSERT_TRUE(shards_[0]->SetReplicaView(view, &resp).ok());
  EXPECT_TRUE(resp.lagging().empty());
  // (Shard 1 failed over: the held push is answered, the test ends.)
  ASSERT_TRUE(shards_[0]->SetReplicaView(View(3, {1}), &resp).ok());
  ASSERT_TRUE(call->done.WaitForNotificationWithTimeout(kWait));
  Hold(false);
}

// A backup that is only slow (a big step saturates its link or CPU) takes
// its forwards once their deadline has grown to what it needs, and is not
// reported lagging meanwhile; one that takes nothing even at the longest
// deadline is.
TEST_F(ShardReplicationAspTest, ASlowBackupGetsLongerDeadlinesNotAFailover) {
  auto needs = [this](absl::Duration d) {
    absl::MutexLock l(&fenced_mu_);
    needs_ = d;
    offered_.clear();
  };
  auto lagging = [this]() {
    SetReplicaViewRequest view = View(1, {});
    view.set_lag_ms(1);
    SetReplicaViewResponse resp;
    EXPECT_TRUE(shards_[0]->SetReplicaView(view, &resp).ok());
    return std::vector<uint32_t>(resp.lagging().begin(), resp.lagging().end());
  };
  // Forwards need 3 s: tried with 1 s and 2 s (cut off), taken with 4 s.
  needs(absl::Seconds(3));
  auto call = StartPushPull(
      *shards_[0], PushRequestFor<PushPullRequest>(reg_, 0, 0, {0, 2}, 0));
  const absl::Time give_up = absl::Now() + kWait;
  bool reported_while_slow = false;
  while (!call->done.HasBeenNotified() && absl::Now() < give_up) {
    reported_while_slow = reported_while_slow || !lagging().empty();
    call->done.WaitForNotificationWithTimeout(absl::Milliseconds(1));
  }
  EXPECT_FALSE(reported_while_slow) << "the slow backup was reported lagging";
  ASSERT_TRUE(call->done.HasBeenNotified()) << "the slow backup never took it";
  EXPECT_TRUE(call->status.ok()) << call->status;
  EXPECT_THAT(lagging(), ::testing::IsEmpty());
  {
    absl::MutexLock l(&fenced_mu_);
    ASSERT_GE(offered_.size(), 3u);
    EXPECT_LE(offered_[0], absl::Seconds(1));
    EXPECT_GT(offered_[0], absl::Milliseconds(900));
    EXPECT_GT(offered_.back(), absl::Seconds(3));
    EXPECT_LE(offered_.back(), absl::Seconds(4));
  }
  // Forwards that no deadline is enough for: reported once one was given
  // the longest (8 s) and failed too.
  needs(absl::Hours(1));
  call = StartPushPull(*shards_[0],
                       PushRequestFor<PushPullRequest>(reg_, 0, 1, {0, 2}, 1));
  std::vector<uint32_t> reported;
  const absl::Time deadline = absl::Now() + kWait;
  while (reported.empty() && absl::Now() < deadline) {
    reported = lagging();
    absl::SleepFor(absl::Milliseconds(1));  // a poll, not a synchronization
  }
  EXPECT_THAT(reported, ::testing::ElementsAre(1u));
  {
    absl::MutexLock l(&fenced_mu_);
    ASSERT_FALSE(offered_.empty());
    EXPECT_GT(offered_.back(), absl::Seconds(7));
    EXPECT_LE(offered_.back(), absl::Seconds(8));
  }
  needs(absl::ZeroDuration());
  ASSERT_TRUE(call->done.WaitForNotificationWithTimeout(kWait));
  EXPECT_TRUE(call->status.ok()) << call->status;
}

TEST_F(ShardReplicationAspTest, APushIsAcknowledgedOnceTheBackupHoldsIt) {
  // Forwards fail: the push is applied but not acknowledged.
  Hold(true);
  auto call = StartPushPull(
      *shards_[0], PushRequestFor<PushPullRequest>(reg_, 0, 0, {0, 2}, 0));
  EXPECT_FALSE(call->done.HasBeenNotified());
  PushResponse push_resp;
  absl::Notification pushed;
  absl::Status push_status;
  shards_[0]->Push(PushRequestFor<PushRequest>(reg_, 1, 0, {0}, 0), &push_resp,
                   [&](absl::Status s) {
                     push_status = s;
                     pushed.Notify();
                   });
  EXPECT_FALSE(pushed.HasBeenNotified());
  // The backup takes the forwards: both are acknowledged.
  Hold(false);
  ASSERT_TRUE(call->done.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(call->status.ok()) << call->status;
  ASSERT_TRUE(pushed.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(push_status.ok()) << push_status;
  const std::vector<std::vector<float>> primary = Params(*shards_[0], "j");

  // Shard 0 is failed over; the workers resend what they pushed there
  // (same worker and step): shard 1 got the (worker, step) dedupe state
  // with the values, so nothing is applied twice.
  SetReplicaViewResponse resp;
  ASSERT_TRUE(shards_[1]->SetReplicaView(View(2, {0}), &resp).ok());
  auto retry = StartPushPull(
      *shards_[1], PushRequestFor<PushPullRequest>(reg_, 0, 0, {0, 2}, 0));
  ASSERT_TRUE(retry->done.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(retry->status.ok()) << retry->status;
  EXPECT_EQ(retry->resp.duplicates(), 2u);
  PushResponse again;
  ASSERT_TRUE(
      shards_[1]
          ->Push(PushRequestFor<PushRequest>(reg_, 1, 0, {0}, 0), &again)
          .ok());
  EXPECT_EQ(again.duplicates(), 1u);
  for (const ChunkData& d : retry->resp.parameters()) {
    EXPECT_EQ(d.version(), d.chunk_id() == 0 ? 2u : 1u) << d.chunk_id();
  }
  const std::vector<std::vector<float>> successor = Params(*shards_[1], "j");
  // Shard 0 served chunks 0 and 2; shard 1 serves all four now.
  EXPECT_EQ(successor[0], primary[0]);
  EXPECT_EQ(successor[2], primary[1]);
}

// The old primary may have answered a worker with an update it had not
// replicated yet (another worker's push, not acknowledged, resent later):
// after the failover that worker's next gradient is of a version its
// chunk's successor never reached. It is applied (staleness 0); on a chunk
// the shard serves as its own primary a version ahead is still refused.
TEST_F(ShardReplicationAspTest, AfterAFailoverAGradientAheadOfTheCopyIsTaken) {
  SetReplicaViewResponse resp;
  ASSERT_TRUE(shards_[1]->SetReplicaView(View(2, {0}), &resp).ok());
  const std::vector<std::vector<float>> before = Params(*shards_[1], "j");
  auto ahead = StartPushPull(
      *shards_[1], PushRequestFor<PushPullRequest>(reg_, 0, 0, {0}, 3));
  ASSERT_TRUE(ahead->done.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(ahead->status.ok()) << ahead->status;
  EXPECT_EQ(ahead->resp.parameters(0).version(), 1u);
  auto own = StartPushPull(*shards_[1],
                           PushRequestFor<PushPullRequest>(reg_, 0, 0, {1}, 3));
  ASSERT_TRUE(own->done.WaitForNotificationWithTimeout(kWait));
  EXPECT_EQ(own->status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(own->status.message(), HasSubstr("is ahead of"));
  EXPECT_EQ(Params(*shards_[1], "j")[1], before[1]);
}

}  // namespace
}  // namespace shard_test
}  // namespace ps
