// Shard tests, live re-placement (Reshard): placement epochs on requests,
// the pause at a step boundary, ABORT and COMMIT in and out of order, and
// bad requests refused naming their field with nothing changed. Moves of
// chunks between shards: shard_reshard_move_test.cc.
#include "server/shard.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/not_retryable.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/internal/held_pushes.h"
#include "server/push_input.h"
#include "server/testing/reshard_fixture.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace shard_test {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

RegisterJobRequest OneShardJob(const std::string& id = "j") {
  return Registration(id, Spec(BSP, 2));
}

// Registers `reg` on `shard` and runs its BSP step 0 (placement_epoch 0, as
// before any re-placement).
void RegisterAndStepOnce(Shard& shard, const RegisterJobRequest& reg) {
  RegisterJobResponse r;
  ASSERT_TRUE(shard.RegisterJob(reg, &r).ok());
  BspStep(shard, reg, 0);
}

// PAUSE at `step`, PREPARE the same chunks at `epoch`, COMMIT: a
// re-placement that moves nothing (one shard).
void ReplaceInPlace(Shard& shard, const RegisterJobRequest& reg, uint64_t epoch,
                    uint64_t step) {
  ReshardResponse resp;
  ASSERT_TRUE(
      shard
          .Reshard(Phase(reg.job_id(), epoch, ReshardRequest::PAUSE, step),
                   &resp)
          .ok());
  ASSERT_TRUE(resp.quiesced());
  ReshardRequest prepare = Phase(reg.job_id(), epoch, ReshardRequest::PREPARE);
  *prepare.mutable_placement() =
      Replaced(reg.placement(), epoch, [](uint32_t) { return 0; });
  prepare.add_shard_addresses("s0");
  ASSERT_TRUE(shard.Reshard(prepare, &resp).ok());
  EXPECT_EQ(resp.chunks_held(), static_cast<uint32_t>(kNumChunks));
  EXPECT_EQ(resp.chunks_fetched(), 0u);
  ASSERT_TRUE(
      shard.Reshard(Phase(reg.job_id(), epoch, ReshardRequest::COMMIT), &resp)
          .ok());
}

TEST(ShardReshardTest, EpochZeroIsServedAndAnUncommittedEpochIsRetried) {
  Shard shard(ShardOptions{});
  const RegisterJobRequest reg = OneShardJob();
  ASSERT_NO_FATAL_FAILURE(RegisterAndStepOnce(shard, reg));
  auto ahead = StartPush(shard, reg, 0, 1, AllChunks(), /*epoch=*/1);
  ASSERT_TRUE(ahead->done.HasBeenNotified());
  EXPECT_EQ(ahead->status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(ahead->status.message()),
              StartsWith("shard 0 has not committed placement epoch 1 of "
                         "job j yet"));
  EXPECT_EQ(Rejected(StatsOf(shard, "j"), "placement_ahead"), 1u);
  BspStep(shard, reg, 1);  // nothing of it was taken
}

TEST(ShardReshardTest, OlderEpochsAreAbortedOnEveryDenseCall) {
  Shard shard(ShardOptions{});
  const RegisterJobRequest reg = OneShardJob();
  ASSERT_NO_FATAL_FAILURE(RegisterAndStepOnce(shard, reg));
  ReplaceInPlace(shard, reg, /*epoch=*/1, /*step=*/1);
  const std::string head =
      "job j was re-placed (placement epoch 1; this request has 0)";
  auto push_pull = StartPush(shard, reg, 0, 1, AllChunks(), 0);
  EXPECT_EQ(push_pull->status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(push_pull->status.message()), StartsWith(head));
  auto pull = StartPull(shard, "j", 1, 0);
  EXPECT_EQ(pull->status.code(), absl::StatusCode::kAborted);
  PushRequest push = PushRequestFor<PushRequest>(reg, 1, 1, AllChunks(), 1);
  PushResponse pr;
  const absl::Status st = shard.Push(push, &pr);
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(st.message()), StartsWith(head));
  EXPECT_EQ(Rejected(StatsOf(shard, "j"), "old_placement"), 3u);
  // The same steps at the new epoch go on.
  std::vector<std::unique_ptr<PushPullCall>> calls;
  for (uint32_t w : {0u, 1u})
    calls.push_back(StartPush(shard, reg, w, 1, AllChunks(), 1));
  for (auto& c : calls) {
    ASSERT_TRUE(c->done.HasBeenNotified());
    EXPECT_TRUE(c->status.ok()) << c->status;
  }
  EXPECT_EQ(StatsOf(shard, "j").version(), 2u);
}

TEST(ShardReshardTest, PauseRefusesPushesFromItsStepAndQuiescesThere) {
  Shard shard(ShardOptions{});
  const RegisterJobRequest reg = OneShardJob();
  ASSERT_NO_FATAL_FAILURE(RegisterAndStepOnce(shard, reg));
  ReshardResponse resp;
  // The probe changes nothing.
  ASSERT_TRUE(shard.Reshard(Phase("j", 1, ReshardRequest::PAUSE), &resp).ok());
  EXPECT_EQ(resp.max_version(), 1u);
  EXPECT_FALSE(resp.quiesced());
  ASSERT_TRUE(
      shard.Reshard(Phase("j", 1, ReshardRequest::PAUSE, 2), &resp).ok());
  EXPECT_FALSE(resp.quiesced());
  EXPECT_EQ(resp.max_version(), 1u);
  BspStep(shard, reg, 1);  // before the pause step: served
  auto refused = StartPush(shard, reg, 0, 2, AllChunks(), 0);
  ASSERT_TRUE(refused->done.HasBeenNotified());
  EXPECT_EQ(refused->status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(refused->status.message(),
              HasSubstr("job j pauses at step 2 for a re-placement"));
  EXPECT_TRUE(IsPausedForReplacement(refused->status));  // retried longer
  // Polled again: quiesced now, and nothing buffered for step 2.
  ASSERT_TRUE(
      shard.Reshard(Phase("j", 1, ReshardRequest::PAUSE, 2), &resp).ok());
  EXPECT_TRUE(resp.quiesced());
  EXPECT_EQ(resp.max_version(), 2u);
  const JobStats stats = StatsOf(shard, "j");
  EXPECT_EQ(Rejected(stats, "paused"), 1u);
  EXPECT_TRUE(stats.missing_workers().empty());
  EXPECT_EQ(shard.PendingWaits(), 0u);
}

// A PushPull as the RPC layer makes it (Shard::PushPull with hold_until):
// the request and its gradients live with the call.
struct HeldCall {
  PushPullRequest req;
  GradientsIn gradients;
  PushPullCall call;
};
std::unique_ptr<HeldCall> StartHeld(Shard& shard, const RegisterJobRequest& reg,
                                    uint32_t worker, uint64_t step,
                                    uint64_t epoch = 0) {
  auto h = std::make_unique<HeldCall>();
  h->req =
      PushRequestFor<PushPullRequest>(reg, worker, step, AllChunks(), step);
  h->req.set_placement_epoch(epoch);
  h->gradients = GradientsFrom(h->req.gradients());
  shard.PushPull(h->req, h->gradients, &h->call.resp, h->call.Callback(),
                 nullptr, absl::Now() + absl::Seconds(60));
  return h;
}

// `reg` registered and stepped once on `shard`, then paused at step 1 for
// placement epoch 1.
void RegisterAndPause(Shard& shard, const RegisterJobRequest& reg) {
  ASSERT_NO_FATAL_FAILURE(RegisterAndStepOnce(shard, reg));
  ReshardResponse resp;
  ASSERT_TRUE(
      shard.Reshard(Phase(reg.job_id(), 1, ReshardRequest::PAUSE, 1), &resp)
          .ok());
}

// A push of the pause's step is held, not refused: an ABORT runs it (the
// step then completes as ever), a COMMIT answers it ABORTED at once.
TEST(ShardReshardTest, APausedPushIsHeldThenRunOrAnsweredAborted) {
  Shard shard(ShardOptions{});
  const RegisterJobRequest reg = OneShardJob();
  ASSERT_NO_FATAL_FAILURE(RegisterAndPause(shard, reg));
  ReshardResponse resp;
  auto first = StartHeld(shard, reg, 0, 1);
  EXPECT_FALSE(first->call.done.HasBeenNotified());
  ASSERT_TRUE(shard.Reshard(Phase("j", 1, ReshardRequest::ABORT), &resp).ok());
  EXPECT_FALSE(first->call.done.HasBeenNotified());  // waits for worker 1
  auto second = StartPushPull(shard, reg, 1, 1, 1);
  ASSERT_TRUE(first->call.done.HasBeenNotified());
  EXPECT_TRUE(first->call.status.ok()) << first->call.status;
  EXPECT_TRUE(second->status.ok()) << second->status;
  EXPECT_EQ(StatsOf(shard, "j").version(), 2u);

  ASSERT_TRUE(
      shard.Reshard(Phase("j", 2, ReshardRequest::PAUSE, 2), &resp).ok());
  ASSERT_TRUE(resp.quiesced());
  auto held = StartHeld(shard, reg, 0, 2);
  EXPECT_FALSE(held->call.done.HasBeenNotified());
  ReshardRequest prepare = Phase("j", 2, ReshardRequest::PREPARE);
  *prepare.mutable_placement() =
      Replaced(reg.placement(), 2, [](uint32_t) { return 0; });
  prepare.add_shard_addresses("s0");
  ASSERT_TRUE(shard.Reshard(prepare, &resp).ok());
  EXPECT_FALSE(held->call.done.HasBeenNotified());
  ASSERT_TRUE(shard.Reshard(Phase("j", 2, ReshardRequest::COMMIT), &resp).ok());
  ASSERT_TRUE(held->call.done.HasBeenNotified());
  EXPECT_EQ(held->call.status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(held->call.status.message(), HasSubstr("was re-placed"));
  EXPECT_EQ(StatsOf(shard, "j").version(), 2u);  // nothing of step 2 applied
}

// Held at most until its deadline (then the paused UNAVAILABLE the worker
// retries on), and answered when the job is dropped.
TEST(ShardReshardTest, AHeldPushIsAnsweredAtItsDeadlineOrWhenTheJobGoes) {
  Shard shard(ShardOptions{});
  const RegisterJobRequest reg = OneShardJob();
  ASSERT_NO_FATAL_FAILURE(RegisterAndPause(shard, reg));
  auto held = StartHeld(shard, reg, 0, 1);
  shard.CheckDeadlines(absl::Now() + absl::Seconds(1));
  EXPECT_FALSE(held->call.done.HasBeenNotified());
  shard.CheckDeadlines(absl::Now() + internal::kMaxPauseHold);
  ASSERT_TRUE(held->call.done.HasBeenNotified());
  EXPECT_TRUE(IsPausedForReplacement(held->call.status)) << held->call.status;
  auto dropped = StartHeld(shard, reg, 1, 1);
  EXPECT_FALSE(dropped->call.done.HasBeenNotified());
  DropJobRequest drop;
  drop.set_job_id("j");
  ASSERT_TRUE(shard.DropJob(drop).ok());
  ASSERT_TRUE(dropped->call.done.HasBeenNotified());
  EXPECT_THAT(dropped->call.status.message(), HasSubstr("was dropped"));
}

TEST(ShardReshardTest, APauseTooLateIsRefusedAndChangesNothing) {
  Shard shard(ShardOptions{});
  const RegisterJobRequest reg = OneShardJob();
  RegisterJobResponse r;
  ASSERT_TRUE(shard.RegisterJob(reg, &r).ok());
  for (uint64_t t = 0; t < 3; ++t) BspStep(shard, reg, t);
  ReshardResponse resp;
  absl::Status st =
      shard.Reshard(Phase("j", 1, ReshardRequest::PAUSE, 2), &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("is at version 3, past step 2"));
  // Worker 0's push of step 3 is buffered; a pause at 3 comes too late.
  auto first = StartPush(shard, reg, 0, 3, AllChunks(), 0);
  EXPECT_FALSE(first->done.HasBeenNotified());
  st = shard.Reshard(Phase("j", 1, ReshardRequest::PAUSE, 3), &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("holds pushes of step 3"));
  auto second = StartPush(shard, reg, 1, 3, AllChunks(), 0);
  for (auto* c : {first.get(), second.get()}) {
    ASSERT_TRUE(c->done.HasBeenNotified());
    EXPECT_TRUE(c->status.ok()) << c->status;
  }
  EXPECT_EQ(Rejected(StatsOf(shard, "j"), "paused"), 0u);
  // Nothing paused: the same as an undisturbed run.
  BspStep(shard, reg, 4);
  EXPECT_EQ(Checksum(shard, "j"), ReferenceChecksum(reg, 5));
}

TEST(ShardReshardTest, AbortLiftsThePauseAndCommitNeedsAPrepare) {
  Shard shard(ShardOptions{});
  const RegisterJobRequest reg = OneShardJob();
  ASSERT_NO_FATAL_FAILURE(RegisterAndStepOnce(shard, reg));
  ReshardResponse resp;
  // ABORT with nothing paused: OK.
  EXPECT_TRUE(shard.Reshard(Phase("j", 1, ReshardRequest::ABORT), &resp).ok());
  ASSERT_TRUE(
      shard.Reshard(Phase("j", 1, ReshardRequest::PAUSE, 1), &resp).ok());
  EXPECT_TRUE(resp.quiesced());
  absl::Status st = shard.Reshard(Phase("j", 1, ReshardRequest::COMMIT), &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("PREPARE first"));
  ReshardRequest prepare = Phase("j", 1, ReshardRequest::PREPARE);
  *prepare.mutable_placement() =
      Replaced(reg.placement(), 1, [](uint32_t) { return 0; });
  prepare.add_shard_addresses("s0");
  ASSERT_TRUE(shard.Reshard(prepare, &resp).ok());
  // Resent: the same answer. Polled: still quiesced, still prepared.
  ReshardResponse again;
  ASSERT_TRUE(shard.Reshard(prepare, &again).ok());
  EXPECT_EQ(again.chunks_held(), resp.chunks_held());
  ASSERT_TRUE(
      shard.Reshard(Phase("j", 1, ReshardRequest::PAUSE, 1), &again).ok());
  EXPECT_TRUE(again.quiesced());
  ASSERT_TRUE(shard.Reshard(Phase("j", 1, ReshardRequest::ABORT), &resp).ok());
  // The old placement goes on, as if nothing had happened.
  BspStep(shard, reg, 1);
  EXPECT_EQ(Checksum(shard, "j"), ReferenceChecksum(reg, 2));
  // A later epoch commits; again is OK; ABORT of it is refused.
  ReplaceInPlace(shard, reg, 1, 2);
  ASSERT_TRUE(shard.Reshard(Phase("j", 1, ReshardRequest::COMMIT), &resp).ok());
  EXPECT_EQ(resp.chunks_held(), static_cast<uint32_t>(kNumChunks));
  st = shard.Reshard(Phase("j", 1, ReshardRequest::ABORT), &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("committed"));
}

TEST(ShardReshardTest, CommitFailsTheOldJobsWaitsWithAborted) {
  Shard shard(ShardOptions{});
  const RegisterJobRequest reg = OneShardJob();
  ASSERT_NO_FATAL_FAILURE(RegisterAndStepOnce(shard, reg));
  auto waiting = StartPull(shard, "j", 1, /*min_version=*/2);
  EXPECT_FALSE(waiting->done.HasBeenNotified());
  ReplaceInPlace(shard, reg, 1, 1);
  ASSERT_TRUE(waiting->done.HasBeenNotified());
  EXPECT_EQ(waiting->status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(waiting->status.message(), HasSubstr("was re-placed"));
  EXPECT_EQ(shard.PendingWaits(), 0u);
  // Counters and membership carried over.
  const JobStats stats = StatsOf(shard, "j");
  EXPECT_EQ(stats.pushes(), 2u * kNumChunks);
  EXPECT_EQ(stats.version(), 1u);
}

// A request that is refused changes nothing: the job trains on after each.
TEST(ShardReshardTest, BadRequestsAreRefusedNamingTheField) {
  Shard shard(ShardOptions{});
  const RegisterJobRequest reg = OneShardJob();
  ASSERT_NO_FATAL_FAILURE(RegisterAndStepOnce(shard, reg));
  auto with_placement = [&](uint64_t epoch, Placement p) {
    ReshardRequest q = Phase("j", epoch, ReshardRequest::PREPARE);
    *q.mutable_placement() = std::move(p);
    q.add_shard_addresses("s0");
    return q;
  };
  Placement short_placement =
      Replaced(reg.placement(), 1, [](uint32_t) { return 0; });
  short_placement.mutable_chunks()->RemoveLast();
  struct Case {
    std::string name;
    ReshardRequest req;
    absl::StatusCode code;
    std::string text;
  };
  const std::vector<Case> cases = {
      {"unknown job", Phase("nope", 1, ReshardRequest::PAUSE, 2),
       absl::StatusCode::kNotFound, "job_id"},
      {"epoch not past", Phase("j", 0, ReshardRequest::PAUSE, 2),
       absl::StatusCode::kInvalidArgument, "epoch: 0 is not past"},
      {"no phase", Phase("j", 1, ReshardRequest::PHASE_UNSPECIFIED),
       absl::StatusCode::kInvalidArgument, "phase"},
      {"pause step", Phase("j", 1, ReshardRequest::PAUSE, UINT64_MAX),
       absl::StatusCode::kInvalidArgument, "pause_step"},
      {"prepare unpaused",
       with_placement(1,
                      Replaced(reg.placement(), 1, [](uint32_t) { return 0; })),
       absl::StatusCode::kFailedPrecondition, "PAUSE first"},
      {"placement epoch",
       with_placement(2,
                      Replaced(reg.placement(), 1, [](uint32_t) { return 0; })),
       absl::StatusCode::kInvalidArgument, "placement.epoch"},
      {"placement chunks", with_placement(1, short_placement),
       absl::StatusCode::kInvalidArgument, "placement.chunks"},
      {"commit epoch", Phase("j", 0, ReshardRequest::COMMIT),
       absl::StatusCode::kInvalidArgument, "epoch"},
  };
  for (const Case& c : cases) {
    ReshardResponse resp;
    const absl::Status st = shard.Reshard(c.req, &resp);
    EXPECT_EQ(st.code(), c.code) << c.name << ": " << st;
    EXPECT_THAT(st.message(), HasSubstr(c.text)) << c.name;
  }
  FetchChunksRequest fetch;
  fetch.set_job_id("j");
  fetch.set_epoch(1);
  fetch.add_chunk_ids(0);
  FetchChunksResponse got;
  EXPECT_EQ(shard.FetchChunks(fetch, &got).code(),
            absl::StatusCode::kFailedPrecondition);
  fetch.set_job_id("nope");
  EXPECT_EQ(shard.FetchChunks(fetch, &got).code(), absl::StatusCode::kNotFound);
  BspStep(shard, reg, 1);
  EXPECT_EQ(Checksum(shard, "j"), ReferenceChecksum(reg, 2));
}

TEST(ShardReshardTest, JobsThatCannotBeReplacedAreRefused) {
  Shard shard(ShardOptions{});
  // Sparse rows move under BSP only (reshard_tables.h).
  JobSpec tables = SparseSpec(ASP, 2);
  // Replicated jobs move under BSP only (shard_reshard_replicated_test).
  const RegisterJobRequest rep = ReplicatedOnTwo("rep", Spec(ASP, 2));
  const std::vector<std::pair<RegisterJobRequest, std::string>> cases = {
      {Registration("tables", tables), "spec.consistency.mode"},
      {rep, "spec.consistency.mode"},
  };
  for (const auto& [reg, field] : cases) {
    RegisterJobResponse r;
    ASSERT_TRUE(shard.RegisterJob(reg, &r).ok()) << field;
    ReshardResponse resp;
    const absl::Status st =
        shard.Reshard(Phase(reg.job_id(), 1, ReshardRequest::PAUSE, 1), &resp);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_THAT(std::string(st.message()), StartsWith(field));
  }
}

// A push racing a PAUSE of its step: never both accepted (a push of the
// pause step buffered after the PAUSE answered OK).
TEST(ShardReshardTest, APushAndAPauseOfItsStepNeverBothSucceed) {
  Shard shard(ShardOptions{});
  for (int trial = 0; trial < 100; ++trial) {
    const RegisterJobRequest reg = OneShardJob(absl::StrCat("j", trial));
    ASSERT_NO_FATAL_FAILURE(RegisterAndStepOnce(shard, reg));
    std::unique_ptr<PushPullCall> push;
    absl::Status pause;
    std::thread a([&] { push = StartPush(shard, reg, 0, 1, AllChunks(), 0); });
    std::thread b([&] {
      ReshardResponse resp;
      pause = shard.Reshard(Phase(reg.job_id(), 1, ReshardRequest::PAUSE, 1),
                            &resp);
    });
    a.join();
    b.join();
    // Buffered: waits for worker 1. Refused: answered UNAVAILABLE at once.
    const bool accepted = !push->done.HasBeenNotified() || push->status.ok();
    EXPECT_FALSE(accepted && pause.ok()) << "trial " << trial;
    DropJobRequest drop;
    drop.set_job_id(reg.job_id());
    ASSERT_TRUE(shard.DropJob(drop).ok());
    ASSERT_TRUE(push->done.HasBeenNotified());
  }
}

}  // namespace
}  // namespace shard_test
}  // namespace ps
