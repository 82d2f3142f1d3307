// Shard tests, replicated jobs warm-started from a job (JobSpec.init.from_job
// with replication 2) on two in-process shards whose forwards call each
// other directly: only the primaries' shards hold the source's chunks, so
// the backups get the initial state from their primary, and no answer (a
// version-0 pull included) goes out before every live backup holds it. A
// backup promoted after that serves the source's values bitwise; one
// promoted before it got them answers nothing and names the warm start.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "server/testing/replication_fixture.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace shard_test {
namespace {

using ::testing::HasSubstr;

// The fixture's two shards also hold "first" (no replicas, chunk i on
// shard i % 2, one step applied, so its values are not its seed's), and
// "warm": replication 2 from "first" with its optimizer state, chunk i's
// backup on the other shard.
class ShardReplicationWarmStartTest : public ShardReplicationTest {
 protected:
  void SetUp() override {
    ShardReplicationTest::SetUp();
    first_ = Registration("first", Spec(BSP, 2), 2);
    RegisterJobResponse resp;
    for (uint32_t s = 0; s < 2; ++s) {
      ASSERT_TRUE(shards_[s]->RegisterJob(first_, &resp).ok());
    }
    std::vector<std::unique_ptr<PushPullCall>> calls;
    for (uint32_t s = 0; s < 2; ++s) {
      for (uint32_t w = 0; w < 2; ++w) {
        calls.push_back(StartPushPull(
            *shards_[s],
            PushRequestFor<PushPullRequest>(first_, w, 0, {s, s + 2}, 0)));
      }
    }
    for (auto& call : calls) {
      ASSERT_TRUE(call->done.WaitForNotificationWithTimeout(kWait));
      ASSERT_TRUE(call->status.ok()) << call->status;
    }
    JobSpec spec = Spec(BSP, 2);
    spec.mutable_consistency()->set_step_deadline_ms(kDeadlineMs);
    spec.mutable_init()->set_from_job("first");
    spec.mutable_init()->set_optimizer_state(true);
    warm_ = ReplicatedOnTwo("warm", spec);
  }

  void RegisterWarm() {
    RegisterJobResponse resp;
    for (uint32_t s = 0; s < 2; ++s) {
      absl::Status st = shards_[s]->RegisterJob(warm_, &resp);
      ASSERT_TRUE(st.ok()) << st;
      EXPECT_EQ(resp.chunks_held(), 4u);  // 2 primaries, 2 backups
    }
  }

  // Both workers push `step` of "warm" to shard `shard`, every chunk.
  void WarmStep(uint32_t shard, uint64_t step) {
    std::vector<std::unique_ptr<PushPullCall>> calls;
    for (uint32_t w = 0; w < 2; ++w) {
      calls.push_back(StartPushPull(
          *shards_[shard],
          PushRequestFor<PushPullRequest>(warm_, w, step, AllChunks(), step)));
    }
    for (auto& call : calls) {
      ASSERT_TRUE(call->done.WaitForNotificationWithTimeout(kWait));
      ASSERT_TRUE(call->status.ok()) << call->status;
    }
  }

  // "first"'s values of `chunk`, from the shard that holds it.
  std::vector<float> Source(uint32_t chunk) {
    auto call = StartPull(*shards_[chunk % 2], "first", 0, 0, {chunk});
    EXPECT_TRUE(call->status.ok()) << call->status;
    return call->resp.parameters_size() == 1
               ? Floats(call->resp.parameters(0).data())
               : std::vector<float>{};
  }

  static constexpr uint32_t kDeadlineMs = 2000;
  RegisterJobRequest first_;
  RegisterJobRequest warm_;
};

TEST_F(ShardReplicationWarmStartTest, NoAnswerBeforeTheBackupHoldsTheStart) {
  Hold(true);  // every forward fails until released
  ASSERT_NO_FATAL_FAILURE(RegisterWarm());
  // A step-0 pull of shard 0's chunk waits for its backup on shard 1.
  auto pull = StartPull(*shards_[0], "warm", 0, 0, {0});
  EXPECT_FALSE(
      pull->done.WaitForNotificationWithTimeout(absl::Milliseconds(300)))
      << pull->status;
  Hold(false);  // the primary's retries get through
  ASSERT_TRUE(pull->done.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(pull->status.ok()) << pull->status;
  ASSERT_EQ(pull->resp.parameters_size(), 1);
  EXPECT_EQ(pull->resp.parameters(0).version(), 0u);
  EXPECT_EQ(Floats(pull->resp.parameters(0).data()), Source(0));
  // Each shard's chunks answer once its backup holds them: every backup
  // copy was sent the source's values. (A shard's count of the copies it
  // holds follows the other shard's answers, so it is read after both.)
  for (uint32_t s = 0; s < 2; ++s) {
    for (uint32_t c : {s, s + 2}) {
      auto got = StartPull(*shards_[s], "warm", 0, 0, {c});
      ASSERT_TRUE(got->done.WaitForNotificationWithTimeout(kWait));
      ASSERT_TRUE(got->status.ok()) << got->status;
      EXPECT_EQ(Floats(got->resp.parameters(0).data()), Source(c)) << c;
    }
  }
  for (uint32_t s = 0; s < 2; ++s) {
    EXPECT_EQ(StatsOf(*shards_[s], "warm").replica_copied_chunks(), 2u) << s;
  }
  // Shard 0 fails: shard 1 serves every chunk, its copies of shard 0's
  // bitwise the source's, optimizer state included (a step agrees below).
  SetReplicaViewResponse resp;
  ASSERT_TRUE(shards_[1]->SetReplicaView(View(2, {0}), &resp).ok());
  for (uint32_t c = 0; c < 4; ++c) {
    auto got = StartPull(*shards_[1], "warm", 0, 0, {c});
    ASSERT_TRUE(got->done.WaitForNotificationWithTimeout(kWait)) << c;
    ASSERT_TRUE(got->status.ok()) << c << ": " << got->status;
    EXPECT_EQ(Floats(got->resp.parameters(0).data()), Source(c)) << c;
  }

  // A step on shard 1 alone goes on as an unreplicated job started from
  // the same source on one shard (the momentum came along too).
  Shard single(ShardOptions{});
  RegisterJobResponse r;
  const RegisterJobRequest alone = Registration("first", Spec(BSP, 2), 1);
  ASSERT_TRUE(single.RegisterJob(alone, &r).ok());
  BspStep(single, alone, 0);
  JobSpec spec = warm_.spec();
  spec.clear_replication();
  const RegisterJobRequest ref = Registration("warm", spec, 1);
  ASSERT_TRUE(single.RegisterJob(ref, &r).ok());
  BspStep(single, ref, 0);
  ASSERT_NO_FATAL_FAILURE(WarmStep(1, 0));
  EXPECT_EQ(Params(*shards_[1], "warm"), Params(single, "warm"));
}

// Shard 0 fails before its backup got the initial state: shard 1 cannot
// serve shard 0's chunks (the source is not there), and says so at the
// deadline instead of answering its seed's values.
TEST_F(ShardReplicationWarmStartTest, ABackupWithoutTheStartServesNothing) {
  Hold(true);
  ASSERT_NO_FATAL_FAILURE(RegisterWarm());
  SetReplicaViewResponse resp;
  ASSERT_TRUE(shards_[1]->SetReplicaView(View(2, {0}), &resp).ok());
  auto pull = StartPull(*shards_[1], "warm", 0, 0, {0});
  EXPECT_FALSE(pull->done.HasBeenNotified());
  shards_[1]->CheckDeadlines(absl::Now() + absl::Milliseconds(kDeadlineMs));
  ASSERT_TRUE(pull->done.WaitForNotificationWithTimeout(kWait));
  EXPECT_TRUE(absl::IsDeadlineExceeded(pull->status)) << pull->status;
  EXPECT_THAT(pull->status.message(),
              HasSubstr("the initial state (spec.init.from_job) did not "
                        "reach every live copy"));
  // Its own chunks were warm-started there: served at once.
  auto own = StartPull(*shards_[1], "warm", 0, 0, {1});
  ASSERT_TRUE(own->done.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(own->status.ok()) << own->status;
  EXPECT_EQ(Floats(own->resp.parameters(0).data()), Source(1));
}

}  // namespace
}  // namespace shard_test
}  // namespace ps
