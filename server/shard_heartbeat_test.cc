// Shard tests, the coordinator's heartbeat (SetReplicaView) as one shard
// sees it: a heartbeat meant for another shard changes nothing, and "no such
// job" stays retryable until the coordinator has named this process.
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace shard_test {
namespace {

using ::testing::HasSubstr;

// The status a push of an unknown job gets.
absl::Status PushUnknown(Shard& shard) {
  PushRequest req;
  req.set_job_id("gone");
  PushResponse resp;
  return shard.Push(req, &resp);
}

TEST(ShardHeartbeatTest, AHeartbeatForAnotherShardChangesNothing) {
  Shard shard(Options(1));
  SetReplicaViewRequest view = View(3, {0});
  view.set_shard(0);  // a stale address: shard 0's heartbeat reached shard 1
  SetReplicaViewResponse resp;
  absl::Status st = shard.SetReplicaView(view, &resp);
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_THAT(st.message(),
              HasSubstr("heartbeat is for shard 0 but this is shard 1"));
  EXPECT_EQ(resp.incarnation(), shard.incarnation());
  ShardStats stats;
  shard.Stats(StatsRequest(), &stats);
  EXPECT_EQ(stats.rejected().at("wrong_shard"), 1u);
  // Epoch 3 was not taken: an older one still is.
  view = View(2, {});
  view.set_shard(1);
  EXPECT_TRUE(shard.SetReplicaView(view, &resp).ok());
  EXPECT_EQ(resp.epoch(), 2u);
}

TEST(ShardHeartbeatTest, NoJobIsRetryableUntilTheCoordinatorKnowsTheProcess) {
  // Restarted, before any heartbeat: the workers retry.
  ShardOptions o = Options(1);
  o.unknown_job_grace = absl::Hours(1);
  Shard restarted(o);
  absl::Status st = PushUnknown(restarted);
  EXPECT_TRUE(absl::IsUnavailable(st)) << st;
  EXPECT_THAT(st.message(), HasSubstr("not yet known to the coordinator"));
  // A heartbeat naming the previous process: still not final.
  SetReplicaViewRequest view = View(1, {});
  view.set_shard(1);
  view.set_incarnation(restarted.incarnation() + 1);
  SetReplicaViewResponse resp;
  ASSERT_TRUE(restarted.SetReplicaView(view, &resp).ok());
  st = PushUnknown(restarted);
  EXPECT_TRUE(absl::IsUnavailable(st)) << st;
  // Named: the job is not here.
  view.set_incarnation(resp.incarnation());
  ASSERT_TRUE(restarted.SetReplicaView(view, &resp).ok());
  st = PushUnknown(restarted);
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  // Without replicas (no heartbeat ever) "no job" is final after the grace.
  Shard plain(Options(0));
  st = PushUnknown(plain);
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  // ... and within it once a job was registered here: the coordinator
  // knows this process.
  ShardOptions fresh_options = Options(0);
  fresh_options.unknown_job_grace = absl::Hours(1);
  Shard fresh(fresh_options);
  EXPECT_TRUE(absl::IsUnavailable(PushUnknown(fresh)));
  JobSpec spec = Spec(BSP, 2);
  RegisterJobResponse reg;
  ASSERT_TRUE(fresh.RegisterJob(Registration("j", spec, 1), &reg).ok());
  st = PushUnknown(fresh);
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
}

}  // namespace
}  // namespace shard_test
}  // namespace ps
