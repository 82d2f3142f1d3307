// Shard tests, replicated jobs (JobSpec.replication = 2) on two in-process
// shards whose forwards call each other directly: answers wait for the
// backup, a failed-over backup takes over bitwise where the primary was,
// and the old primary, fenced by its stale epoch, can change nothing.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace shard_test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::Duration kWait = absl::Seconds(30);

JobSpec ReplicatedSpec(ConsistencyMode mode = BSP) {
  JobSpec spec = Spec(mode, 2);
  spec.mutable_optimizer()->set_momentum(0.9f);
  spec.set_replication(2);
  return spec;
}

// Chunk i on shard i % 2, its backup on the other.
RegisterJobRequest ReplicatedRegistration(ConsistencyMode mode = BSP) {
  RegisterJobRequest reg = Registration("j", ReplicatedSpec(mode), 2);
  for (ChunkPlacement& c : *reg.mutable_placement()->mutable_chunks()) {
    c.add_backups((c.shard() + 1) % 2);
  }
  return reg;
}

class ShardReplicationTest : public ::testing::Test {
 protected:
  virtual ConsistencyMode Mode() const { return BSP; }

  void SetUp() override {
    reg_ = ReplicatedRegistration(Mode());
    for (uint32_t s = 0; s < 2; ++s) {
      ShardOptions o = Options(s);
      o.replicate_retry = absl::Milliseconds(5);
      shards_.push_back(std::make_unique<Shard>(o));
      shards_[s]->SetReplicaSender([this](const std::string& address,
                                          const ReplicateRequest& req,
                                          absl::Time deadline) {
        bool held_chunk = false;
        {
          absl::MutexLock l(&fenced_mu_);
          if (hold_) return absl::UnavailableError("held by the test");
          if (needs_ > absl::ZeroDuration()) {
            // A backup that takes a forward only given `needs_`: a try
            // with less runs out of time (at once, here).
            offered_.push_back(deadline - absl::Now());
            if (offered_.back() < needs_) {
              return absl::DeadlineExceededError("the test's slow backup");
            }
          }
          for (const ReplicaChunk& c : req.chunks()) {
            held_chunk = held_chunk || c.chunk_id() == held_chunk_;
          }
          if (held_chunk && !chunk_held_.HasBeenNotified()) {
            chunk_held_.Notify();
          }
        }
        if (held_chunk) release_.WaitForNotificationWithTimeout(kWait);
        absl::Status st = shards_[address == "s0" ? 0 : 1]->Replicate(req);
        absl::MutexLock l(&fenced_mu_);
        if ((absl::IsFailedPrecondition(st) || absl::IsAborted(st)) &&
            !fenced_.HasBeenNotified()) {
          fenced_status_ = st;
          fenced_.Notify();
        }
        return st;
      });
      SetReplicaViewResponse resp;
      ASSERT_TRUE(shards_[s]->SetReplicaView(View(1, {}), &resp).ok());
      RegisterJobResponse reg;
      ASSERT_TRUE(shards_[s]->RegisterJob(reg_, &reg).ok());
      EXPECT_EQ(reg.chunks_held(), 4u);  // 2 primaries, 2 backups
    }
  }
  void TearDown() override {
    Release();
    shards_[0].reset();  // its forwards call shard 1
    shards_[1].reset();
  }

  // Both workers push `step`: to each shard of `to` its chunks, the whole
  // step on the wire before any answer (as the client does for a job whose
  // answers wait); every answer arrives.
  void Step(uint64_t step,
            std::vector<std::pair<uint32_t, std::vector<uint32_t>>> to) {
    std::vector<std::unique_ptr<PushPullCall>> calls;
    for (const auto& [shard, chunks] : to) {
      for (uint32_t w = 0; w < 2; ++w) {
        calls.push_back(StartPushPull(
            *shards_[shard],
            PushRequestFor<PushPullRequest>(reg_, w, step, chunks, step)));
      }
    }
    for (auto& call : calls) {
      ASSERT_TRUE(call->done.WaitForNotificationWithTimeout(kWait));
      ASSERT_TRUE(call->status.ok()) << call->status;
      for (const ChunkData& d : call->resp.parameters()) {
        EXPECT_EQ(d.version(), step + 1);
      }
    }
  }

  void Hold(bool hold) {
    absl::MutexLock l(&fenced_mu_);
    hold_ = hold;
  }

  // Forwards holding chunk `chunk` wait (in flight) until Release.
  void HoldChunk(uint32_t chunk) {
    absl::MutexLock l(&fenced_mu_);
    held_chunk_ = chunk;
  }
  void Release() {
    if (!release_.HasBeenNotified()) release_.Notify();
  }

  RegisterJobRequest reg_;
  std::vector<std::unique_ptr<Shard>> shards_;
  absl::Notification chunk_held_;  // a forward of held_chunk_ is in flight
  absl::Notification release_;
  absl::Mutex fenced_mu_;  // the first refused forward, noted once
  absl::Notification fenced_;
  absl::Status fenced_status_;
  bool hold_ ABSL_GUARDED_BY(fenced_mu_) = false;  // forwards fail
  // Forwards given less time than this run out of time; the time each
  // forward was given.
  absl::Duration needs_ ABSL_GUARDED_BY(fenced_mu_) = absl::ZeroDuration();
  std::vector<absl::Duration> offered_ ABSL_GUARDED_BY(fenced_mu_);
  uint32_t held_chunk_ ABSL_GUARDED_BY(fenced_mu_) = UINT32_MAX;
};

// The same steps on one shard without replicas.
std::vector<std::vector<float>> Reference(uint64_t steps) {
  JobSpec spec = ReplicatedSpec();
  spec.clear_replication();
  const RegisterJobRequest reg = Registration("j", spec, 1);
  Shard shard(ShardOptions{});
  RegisterJobResponse resp;
  EXPECT_TRUE(shard.RegisterJob(reg, &resp).ok());
  for (uint64_t t = 0; t < steps; ++t) BspStep(shard, reg, t);
  return Params(shard, "j");
}

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

class ShardReplicationAspTest : public ShardReplicationTest {
 protected:
  ConsistencyMode Mode() const override { return ASP; }
};

// ASP: each push waits for its own chunks' backups (a BSP answer would wait
// for the chunks shard 0 is promoted to as well).
TEST_F(ShardReplicationAspTest, ABackupThatTakesNoForwardIsReportedLagging) {
  // Shard 1 answers the coordinator but takes no forward from shard 0.
  Hold(true);
  auto call = StartPushPull(
      *shards_[0], PushRequestFor<PushPullRequest>(reg_, 0, 0, {0, 2}, 0));
  SetReplicaViewRequest view = View(1, {});
  view.set_lag_ms(1);
  SetReplicaViewResponse resp;
  const absl::Time deadline = absl::Now() + kWait;
  while (resp.lagging().empty() && absl::Now() < deadline) {
    resp.Clear();
    ASSERT_TRUE(shards_[0]->SetReplicaView(view, &resp).ok());
    absl::SleepFor(absl::Milliseconds(1));  // a poll, not a synchronization
  }
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
  SetReplicaViewResponse resp;
  const absl::Time deadline = absl::Now() + kWait;
  while (resp.lagging().empty() && absl::Now() < deadline) {
    resp.Clear();
    ASSERT_TRUE(shards_[0]->SetReplicaView(view, &resp).ok());
    absl::SleepFor(absl::Milliseconds(1));  // a poll, not a synchronization
  }
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
