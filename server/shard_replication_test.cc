// Shard tests, replicated jobs (JobSpec.replication = 2) on two in-process
// shards whose forwards call each other directly: answers wait for the
// backup, a failed-over backup takes over bitwise where the primary was,
// and the old primary, fenced by its stale epoch, can change nothing.
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

TEST_F(ShardReplicationTest, BackupsHoldEachStepBeforeItIsAnswered) {
  for (uint64_t t = 0; t < 3; ++t) Step(t, {{0, {0, 2}}, {1, {1, 3}}});
  // Every answer waited for the backup: its copies are at the last step.
  for (uint32_t s = 0; s < 2; ++s) {
    const JobStats st = StatsOf(*shards_[s], "j");
    EXPECT_EQ(st.version(), 3u) << s;
    EXPECT_EQ(st.backup_chunks(), 2u) << s;
    EXPECT_EQ(st.replica_forwards(), 6u) << s;  // 2 chunks x 3 steps
    EXPECT_EQ(st.replica_epoch(), 1u);
  }
  // A backup serves nothing: the client looks for the primary again.
  auto pull = StartPull(*shards_[1], "j", 0, 0, {0});
  ASSERT_TRUE(pull->done.HasBeenNotified());
  EXPECT_TRUE(absl::IsUnavailable(pull->status)) << pull->status;
  EXPECT_THAT(pull->status.message(), HasSubstr("holds a backup"));
  EXPECT_EQ(Rejected(StatsOf(*shards_[1], "j"), "not_acting_primary"), 1u);
}

TEST_F(ShardReplicationTest,
       PromotedBackupGoesOnBitwiseAndTheOldPrimaryIsFenced) {
  for (uint64_t t = 0; t < 2; ++t) Step(t, {{0, {0, 2}}, {1, {1, 3}}});
  // The coordinator fails shard 0 over; shard 0 does not hear of it.
  SetReplicaViewResponse resp;
  ASSERT_TRUE(shards_[1]->SetReplicaView(View(2, {0}), &resp).ok());
  EXPECT_EQ(resp.epoch(), 2u);
  // An older view is refused.
  EXPECT_TRUE(absl::IsFailedPrecondition(
      shards_[1]->SetReplicaView(View(1, {}), &resp)));

  // The old primary applies step 2 but cannot get it acknowledged.
  std::vector<std::unique_ptr<PushPullCall>> lost;
  for (uint32_t w = 0; w < 2; ++w) {
    lost.push_back(StartPushPull(
        *shards_[0], PushRequestFor<PushPullRequest>(reg_, w, 2, {0, 2}, 2)));
  }
  ASSERT_TRUE(fenced_.WaitForNotificationWithTimeout(kWait));
  EXPECT_TRUE(absl::IsAborted(fenced_status_)) << fenced_status_;
  EXPECT_THAT(fenced_status_.message(), HasSubstr("fenced"));
  // The refusal tells shard 0 it is fenced before any view reaches it (the
  // coordinator may not reach it at all): its answers fail UNAVAILABLE at
  // once, so its workers ask where the chunks went, and it answers no
  // other push.
  for (auto& call : lost) {
    ASSERT_TRUE(call->done.WaitForNotificationWithTimeout(kWait));
    EXPECT_TRUE(absl::IsUnavailable(call->status)) << call->status;
    EXPECT_THAT(call->status.message(),
                HasSubstr("shard 0 was failed over (fenced: shard 1 refused"));
  }
  auto late = StartPushPull(
      *shards_[0], PushRequestFor<PushPullRequest>(reg_, 0, 3, {0, 2}, 3));
  ASSERT_TRUE(late->done.WaitForNotificationWithTimeout(kWait));
  EXPECT_TRUE(absl::IsUnavailable(late->status)) << late->status;

  // The workers resend step 2 of shard 0's chunks to shard 1: accepted
  // (shard 1 is still at version 2), applied as shard 0 would have.
  Step(2, {{1, {0, 2}}, {1, {1, 3}}});
  Step(3, {{1, {0, 1, 2, 3}}});
  const JobStats st = StatsOf(*shards_[1], "j");
  EXPECT_EQ(st.backup_chunks(), 0u);
  EXPECT_EQ(st.stale_pushes(), 0u);
  EXPECT_EQ(Params(*shards_[1], "j"), Reference(4));
}

TEST_F(ShardReplicationTest, AViewChangeHeardFirstByTheBackupIsNotFencing) {
  Step(0, {{0, {0, 2}}, {1, {1, 3}}});
  // A new epoch that fails nobody reaches shard 1 before shard 0.
  SetReplicaViewResponse resp;
  ASSERT_TRUE(shards_[1]->SetReplicaView(View(2, {}), &resp).ok());
  std::vector<std::unique_ptr<PushPullCall>> calls;
  for (uint32_t w = 0; w < 2; ++w) {
    calls.push_back(StartPushPull(
        *shards_[0], PushRequestFor<PushPullRequest>(reg_, w, 1, {0, 2}, 1)));
  }
  ASSERT_TRUE(fenced_.WaitForNotificationWithTimeout(kWait));
  EXPECT_THAT(fenced_status_.message(),
              HasSubstr("shard 0 has not heard epoch 2 yet"));
  EXPECT_THAT(fenced_status_.message(), Not(HasSubstr("fenced")));
  // Once shard 0 hears it, the forward goes again and the step is answered.
  ASSERT_TRUE(shards_[0]->SetReplicaView(View(2, {}), &resp).ok());
  for (auto& call : calls) {
    ASSERT_TRUE(call->done.WaitForNotificationWithTimeout(kWait));
    ASSERT_TRUE(call->status.ok()) << call->status;
    EXPECT_EQ(call->resp.parameters(0).version(), 2u);
  }
  EXPECT_EQ(StatsOf(*shards_[1], "j").replica_epoch(), 2u);
}

TEST_F(ShardReplicationTest, BadForwardsChangeNothing) {
  Step(0, {{0, {0, 2}}});
  const std::vector<std::vector<float>> before = Params(*shards_[0], "j");
  ReplicateRequest req;
  req.set_job_id("j");
  req.set_epoch(1);
  req.set_from_shard(1);  // not chunk 0's primary
  ReplicaChunk* c = req.add_chunks();
  c->set_chunk_id(0);
  c->set_version(9);
  c->set_values(std::string(4 * ChunkLength(reg_, 0), '\0'));
  absl::Status st = shards_[1]->Replicate(req);
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  req.set_from_shard(0);
  c->set_values("abc");  // wrong size
  st = shards_[1]->Replicate(req);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  c->set_chunk_id(99);
  st = shards_[1]->Replicate(req);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_THAT(st.message(), HasSubstr("chunks[0].chunk_id"));
  EXPECT_EQ(Rejected(StatsOf(*shards_[1], "j"), "bad_replica"), 3u);
  // Shard 0 is still the primary with its step-1 parameters, and its
  // backup answers as before.
  EXPECT_EQ(Params(*shards_[0], "j"), before);
  Step(1, {{0, {0, 2}}});
  // A gradient whose base version the backup lacks (it holds 2, not 4):
  // OUT_OF_RANGE, nothing changed; the primary would send the state.
  c->set_chunk_id(0);
  c->set_version(5);
  c->clear_values();
  c->set_gradient(std::string(4 * ChunkLength(reg_, 0), '\0'));
  c->set_gradient_scale(0.5f);
  st = shards_[1]->Replicate(req);
  EXPECT_TRUE(absl::IsOutOfRange(st)) << st;
  EXPECT_THAT(st.message(), HasSubstr("chunks[0].gradient: version 5 needs "
                                      "version 4"));
  c->set_gradient("abc");  // wrong size
  st = shards_[1]->Replicate(req);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_EQ(Rejected(StatsOf(*shards_[1], "j"), "bad_replica"), 5u);
  // The backup still takes the next step's forward (and answers wait for
  // it): its copy was left as it was.
  Step(2, {{0, {0, 2}}});
}

// BSP: once a backup acknowledged a chunk's version, the next step goes to
// it as the step's aggregated gradient (its optimizer applies it), not as
// values and momentum: half the bytes. The backup ends bitwise where the
// primary is (PromotedBackupGoesOnBitwise... serves from such a copy).
TEST_F(ShardReplicationTest, StepsAfterTheFirstAreForwardedAsGradients) {
  for (uint64_t t = 0; t < 4; ++t) Step(t, {{0, {0, 2}}, {1, {1, 3}}});
  {
    absl::MutexLock l(&fenced_mu_);
    EXPECT_EQ(state_chunks_, 4);      // step 0: each chunk's first forward
    EXPECT_EQ(gradient_chunks_, 12);  // steps 1-3
  }
  // A backup that lacks a gradient's base (OUT_OF_RANGE) gets the state.
  {
    absl::MutexLock l(&fenced_mu_);
    refuse_gradients_ = 1;
  }
  Step(4, {{0, {0, 2}}, {1, {1, 3}}});
  {
    absl::MutexLock l(&fenced_mu_);
    EXPECT_EQ(refuse_gradients_, 0);
    EXPECT_GE(state_chunks_, 5);
  }
  // Shard 0 fails; shard 1 serves chunks 0 and 2 from its copies.
  SetReplicaViewResponse resp;
  ASSERT_TRUE(shards_[1]->SetReplicaView(View(2, {0}), &resp).ok());
  Step(5, {{1, {0, 1, 2, 3}}});
  EXPECT_EQ(Params(*shards_[1], "j"), Reference(6));
}

// BSP: each chunk is answered once its own step is replicated, not once
// every chunk of the shard is (the first chunks of a step go back while the
// later ones are still forwarded): step 0 of chunk 0 alone is answered
// though shard 0's chunk 2 has none yet.
TEST_F(ShardReplicationTest, AChunkIsAnsweredOnceItsOwnStepIsReplicated) {
  Step(0, {{0, {0}}});
  Step(0, {{0, {2}}});
  Step(1, {{0, {0, 2}}});
}

// Forwards are pipelined: one held in flight holds back only its own
// chunk's answers, and another chunk's forward to the same backup passes
// it (before, one thread sent a job's forwards one after another).
TEST_F(ShardReplicationTest, AForwardInFlightHoldsBackOnlyItsOwnChunk) {
  HoldChunk(0);
  std::vector<std::unique_ptr<PushPullCall>> held;
  for (uint32_t w = 0; w < 2; ++w) {
    held.push_back(StartPushPull(
        *shards_[0], PushRequestFor<PushPullRequest>(reg_, w, 0, {0}, 0)));
  }
  ASSERT_TRUE(chunk_held_.WaitForNotificationWithTimeout(kWait));
  Step(0, {{0, {2}}});  // chunk 2 on the same shard, the same backup
  for (const auto& call : held) EXPECT_FALSE(call->done.HasBeenNotified());
  Release();
  for (const auto& call : held) {
    ASSERT_TRUE(call->done.WaitForNotificationWithTimeout(kWait));
    EXPECT_TRUE(call->status.ok()) << call->status;
  }
  Step(1, {{0, {0, 2}}});
}

// BSP: a Push (Python's push op) is acknowledged once its step is applied
// and the backup holds it, as a PushPull's answer is; before, it was
// acknowledged on arrival, and a primary lost before the step applied took
// the gradient with it.
TEST_F(ShardReplicationTest, ABspPushIsAcknowledgedOnceItsStepIsReplicated) {
  struct Pushed {
    PushResponse resp;
    absl::Notification done;
    absl::Status status;
  };
  auto push = [&](uint32_t worker, Pushed* p) {
    shards_[0]->Push(PushRequestFor<PushRequest>(reg_, worker, 0, {0, 2}, 0),
                     &p->resp, [p](absl::Status s) {
                       p->status = std::move(s);
                       p->done.Notify();
                     });
  };
  Step(0, {{1, {1, 3}}});  // shard 1's own chunks
  Pushed first, second;
  push(0, &first);
  EXPECT_FALSE(first.done.HasBeenNotified());  // worker 1's part is missing
  Hold(true);                                  // forwards fail
  push(1, &second);                            // the step applies
  EXPECT_FALSE(first.done.HasBeenNotified());
  EXPECT_FALSE(second.done.HasBeenNotified());
  Hold(false);
  for (Pushed* p : {&first, &second}) {
    ASSERT_TRUE(p->done.WaitForNotificationWithTimeout(kWait));
    EXPECT_TRUE(p->status.ok()) << p->status;
  }
  // Step 0 is on the backup: failed over, shard 1 runs step 1 on all four.
  SetReplicaViewResponse resp;
  ASSERT_TRUE(shards_[1]->SetReplicaView(View(2, {0}), &resp).ok());
  Step(1, {{1, {0, 1, 2, 3}}});
}

// Re-replication: shard 1 is joining, shard 0 serves all four chunks. A
// chunk's answers do not wait for the joining copy until it acknowledged
// the chunk's version of the moment once; from then on they do, so it
// stays caught up, and shard 0 reports it behind only until then.
TEST_F(ShardReplicationTest, AJoiningCopyIsWaitedForOnceItCaughtUp) {
  SetReplicaViewRequest joining = View(2, {});
  joining.add_joining(1);
  SetReplicaViewResponse resp;
  for (uint32_t s = 0; s < 2; ++s) {
    ASSERT_TRUE(shards_[s]->SetReplicaView(joining, &resp).ok());
  }
  auto behind = [&]() {
    SetReplicaViewResponse r;
    EXPECT_TRUE(shards_[0]->SetReplicaView(joining, &r).ok());
    return std::vector<uint32_t>(r.behind().begin(), r.behind().end());
  };
  auto push = [&](uint64_t step) {
    std::vector<std::unique_ptr<PushPullCall>> calls;
    for (uint32_t w = 0; w < 2; ++w) {
      calls.push_back(StartPushPull(
          *shards_[0],
          PushRequestFor<PushPullRequest>(reg_, w, step, {0, 1, 2, 3}, step)));
    }
    return calls;
  };
  // Not copied yet: the step is answered without it.
  Hold(true);
  for (auto& call : push(0)) {
    ASSERT_TRUE(call->done.HasBeenNotified());
    EXPECT_TRUE(call->status.ok()) << call->status;
  }
  EXPECT_THAT(behind(), ::testing::ElementsAre(1u));
  // Copied (the failed forwards go again): synced, no longer behind.
  Hold(false);
  const absl::Time give_up = absl::Now() + kWait;
  while (!behind().empty() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));  // a poll, not a synchronization
  }
  EXPECT_THAT(behind(), ::testing::IsEmpty());
  // From now on its acknowledgement holds the answers.
  Hold(true);
  auto held = push(1);
  for (auto& call : held) EXPECT_FALSE(call->done.HasBeenNotified());
  Hold(false);
  for (auto& call : held) {
    ASSERT_TRUE(call->done.WaitForNotificationWithTimeout(kWait));
    EXPECT_TRUE(call->status.ok()) << call->status;
  }
  EXPECT_THAT(behind(), ::testing::IsEmpty());
}

}  // namespace
}  // namespace shard_test
}  // namespace ps
