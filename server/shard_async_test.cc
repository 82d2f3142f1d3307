// Shard tests. ASP (applied on arrival, staleness) and SSP (the staleness
// bound).
#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/optimizer.h"
#include "server/shard.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace shard_test {
namespace {

using ::testing::HasSubstr;

TEST(ShardAspTest, AppliesOnArrivalAndRecordsStaleness) {
  Shard shard(ShardOptions{});
  JobSpec spec = Spec(ASP, 2);
  spec.mutable_optimizer()->clear_momentum();
  const RegisterJobRequest reg = Registration("j", spec);
  RegisterJobResponse resp;
  ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
  const std::vector<float> p0 = Params(shard, "j")[0];

  // Both workers computed step 0 against version 0.
  auto a = StartPushPull(shard, reg, 0, 0, 0);
  ASSERT_TRUE(a->done.HasBeenNotified() && a->status.ok());
  EXPECT_EQ(a->resp.parameters(0).version(), 1u);
  // Applied undivided: p - lr * g.
  const std::vector<float> g = Gradient(0, 0, 0, kChunkFloats);
  std::vector<float> want = p0;
  for (size_t i = 0; i < want.size(); ++i) want[i] = want[i] - 0.1f * g[i];
  EXPECT_EQ(Floats(a->resp.parameters(0).data()), want);

  auto b = StartPushPull(shard, reg, 1, 0, 0);  // staleness 1
  ASSERT_TRUE(b->done.HasBeenNotified());
  EXPECT_EQ(b->resp.parameters(0).version(), 2u);
  auto c = StartPushPull(shard, reg, 0, 1, 1);  // staleness 1
  auto d = StartPushPull(shard, reg, 1, 1, 0);  // staleness 3
  auto e = StartPushPull(shard, reg, 0, 2, 4);  // staleness 0
  ASSERT_TRUE(e->done.HasBeenNotified() && e->status.ok());
  EXPECT_EQ(e->resp.parameters(0).version(), 5u);

  const JobStats s = StatsOf(shard, "j");
  EXPECT_EQ(s.mode(), ASP);
  // Per chunk: staleness 0, 1, 1, 3, 0 -> buckets [0]: 2, [1,2): 2, [2,4): 1.
  ASSERT_GE(s.staleness().counts_size(), 3);
  EXPECT_EQ(s.staleness().counts(0), 2u * kNumChunks);
  EXPECT_EQ(s.staleness().counts(1), 2u * kNumChunks);
  EXPECT_EQ(s.staleness().counts(2), 1u * kNumChunks);
  EXPECT_EQ(s.workers(1).staleness(), 3u);
  EXPECT_EQ(s.workers(0).staleness(), 0u);
  EXPECT_EQ(s.version(), 5u);
  EXPECT_EQ(s.applies(), 5u * kNumChunks);

  // A retry of an applied (worker, step) is a duplicate.
  const uint64_t before = Checksum(shard, "j");
  auto retry = StartPushPull(shard, reg, 0, 2, 4);
  EXPECT_EQ(retry->resp.duplicates(), 4u);
  EXPECT_EQ(Checksum(shard, "j"), before);
}

// LR_RULE_LINEAR under ASP and SSP (a job submitted with 2 workers, 4 rank
// slots): each push is applied on arrival with lr x active / 2, the active
// count being the membership's when it arrives (3, then 1).
TEST(ShardAspTest, LinearLrRuleScalesEachPushWithTheActiveWorkers) {
  for (ConsistencyMode mode : {ASP, SSP}) {
    SCOPED_TRACE(ConsistencyMode_Name(mode));
    Shard shard(ShardOptions{});
    JobSpec spec = Spec(mode, 2);
    spec.set_max_workers(4);
    spec.set_lr_rule(LR_RULE_LINEAR);
    if (mode == SSP) spec.mutable_consistency()->set_staleness(8);
    RegisterJobRequest reg = Registration("j", spec);
    reg.set_num_workers(4);
    RegisterJobResponse resp;
    ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
    auto opt = Optimizer::Create(reg.spec().optimizer());
    ASSERT_TRUE(opt.ok());
    std::vector<std::vector<float>> want = Params(shard, "j");
    std::vector<OptimizerState> state;
    for (uint32_t chunk = 0; chunk < kNumChunks; ++chunk) {
      state.push_back((*opt)->NewState(ChunkLength(reg, chunk)));
    }
    // Worker `w`'s step-0 push against `version`, applied with `scale`.
    auto push = [&](const std::vector<uint32_t>& active, uint32_t w,
                    uint64_t version, float scale) {
      SetMembershipRequest m;
      m.set_job_id("j");
      for (uint32_t r : active) m.add_active_workers(r);
      ASSERT_TRUE(shard.SetMembership(m).ok());
      auto call = StartPushPull(shard, reg, w, 0, version);
      ASSERT_TRUE(call->done.HasBeenNotified() && call->status.ok());
      for (uint32_t chunk = 0; chunk < kNumChunks; ++chunk) {
        const uint64_t n = ChunkLength(reg, chunk);
        const std::vector<float> g = Gradient(w, 0, chunk, n);
        (*opt)->Apply(absl::MakeSpan(want[chunk]), g.data(), scale,
                      &state[chunk]);
        EXPECT_EQ(Floats(call->resp.parameters(chunk).data()), want[chunk])
            << chunk;
      }
    };
    push({0, 1, 2}, 2, 0, 3.0f / 2);
    push({0}, 0, 1, 1.0f / 2);
  }
}

TEST(ShardSspTest, BlocksAtStalenessPlusOneAndReleasesWhenSlowestAdvances) {
  constexpr uint32_t kS = 2;
  Shard shard(ShardOptions{});
  JobSpec spec = Spec(SSP, 2);
  spec.mutable_consistency()->set_staleness(kS);
  const RegisterJobRequest reg = Registration("j", spec);
  RegisterJobResponse resp;
  ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());

  // Worker 0 runs ahead while worker 1 has pushed nothing.
  for (uint64_t t = 0; t < kS; ++t) {
    auto call = StartPushPull(shard, reg, 0, t, t);
    ASSERT_TRUE(call->done.HasBeenNotified()) << "step " << t;
    ASSERT_TRUE(call->status.ok());
  }
  // Its step s + 1 - 1 = 2 reply (for step 3) would be 3 ahead of the
  // slowest: it waits, with its gradient already applied.
  auto blocked = StartPushPull(shard, reg, 0, kS, kS);
  EXPECT_FALSE(blocked->done.HasBeenNotified());
  EXPECT_EQ(shard.PendingWaits(), 1u);
  EXPECT_EQ(StatsOf(shard, "j").version(), kS + 1);
  auto pull = StartPull(shard, "j", kS + 1, 0);  // the same bound for Pull
  EXPECT_FALSE(pull->done.HasBeenNotified());

  // The slowest advances one step: both are released.
  auto slow = StartPushPull(shard, reg, 1, 0, 0);
  ASSERT_TRUE(slow->done.HasBeenNotified());
  ASSERT_TRUE(blocked->done.HasBeenNotified());
  ASSERT_TRUE(blocked->status.ok()) << blocked->status;
  ASSERT_TRUE(pull->done.HasBeenNotified());
  EXPECT_EQ(blocked->resp.parameters(0).version(), kS + 2);
  EXPECT_EQ(shard.PendingWaits(), 0u);

  // Worker 0's next step blocks again until worker 1 pushes its step 1.
  auto next = StartPushPull(shard, reg, 0, kS + 1, kS + 2);
  EXPECT_FALSE(next->done.HasBeenNotified());
  const JobStats s = StatsOf(shard, "j");
  EXPECT_EQ(s.step(), 1u);  // the slowest worker pushed 1 step
  EXPECT_EQ(s.workers(0).last_step(), kS + 1);
  auto slow2 = StartPushPull(shard, reg, 1, 1, 1);
  EXPECT_TRUE(next->done.HasBeenNotified());

  // A deadline names the worker holding the wait back.
  auto stuck = StartPushPull(shard, reg, 0, kS + 2, kS + 4);
  EXPECT_FALSE(stuck->done.HasBeenNotified());
  shard.CheckDeadlines(absl::Now() + absl::Minutes(2));
  ASSERT_TRUE(stuck->done.HasBeenNotified());
  EXPECT_EQ(stuck->status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(
      std::string(stuck->status.message()),
      HasSubstr("job j step 2: no gradient from worker 1 after 60000 ms"));
}

}  // namespace
}  // namespace shard_test
}  // namespace ps
