// Shard tests, live re-placement moving chunks between two in-process
// shards (their PREPAREs fetch from each other directly): training on the
// new placement gives bitwise the parameters of an undisturbed single
// layout; ASP/SSP pushes apply once across a move; fetches in batches and
// within the budget; a committed placement survives a restart.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/not_retryable.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "server/testing/reshard_fixture.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace shard_test {
namespace {

using ::testing::HasSubstr;

JobSpec SpecWith(OptimizerKind kind) {
  JobSpec spec = Spec(BSP, 2);
  spec.mutable_optimizer()->set_kind(kind);
  if (kind != SGD) spec.mutable_optimizer()->clear_momentum();
  return spec;
}

// The job on two shards, every chunk on shard 0 (shard 1 holds it empty).
RegisterJobRequest OnShardZero(const JobSpec& spec) {
  RegisterJobRequest reg = Registration("j", spec, 2);
  for (ChunkPlacement& c : *reg.mutable_placement()->mutable_chunks()) {
    c.set_shard(0);
  }
  return reg;
}

// PAUSE at `step` (quiesced), PREPARE `to`, COMMIT, on every shard.
void Replace(ShardGroup& group, const Placement& to, uint64_t step,
             std::vector<ReshardResponse>* prepared = nullptr) {
  const uint64_t epoch = to.epoch();
  std::vector<ReshardResponse> answers;
  ASSERT_TRUE(
      group.OnEvery(Phase("j", epoch, ReshardRequest::PAUSE, step), &answers)
          .ok());
  for (const ReshardResponse& a : answers) ASSERT_TRUE(a.quiesced());
  ReshardRequest prepare = Phase("j", epoch, ReshardRequest::PREPARE);
  *prepare.mutable_placement() = to;
  const absl::Status st = group.OnEvery(prepare, prepared);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE(group.OnEvery(Phase("j", epoch, ReshardRequest::COMMIT)).ok());
}

class ShardReshardMoveTest : public ::testing::TestWithParam<OptimizerKind> {};

TEST_P(ShardReshardMoveTest, TrainsOnBitwiseAsAnUndisturbedLayout) {
  const JobSpec spec = SpecWith(GetParam());
  const RegisterJobRequest reg = OnShardZero(spec);
  ShardGroup group(2);
  ASSERT_TRUE(group.RegisterAll(reg).ok());
  for (uint64_t t = 0; t < 3; ++t) group.Step(reg, reg.placement(), t);
  // Pause at 4: shard 0 reaches it with step 3; step 4 waits.
  std::vector<ReshardResponse> answers;
  ASSERT_TRUE(
      group.OnEvery(Phase("j", 1, ReshardRequest::PAUSE, 4), &answers).ok());
  EXPECT_FALSE(answers[0].quiesced());
  EXPECT_TRUE(answers[1].quiesced());  // no chunks
  group.Step(reg, reg.placement(), 3);
  auto early = StartPush(group.shard(0), reg, 0, 4, AllChunks(), 0);
  EXPECT_EQ(early->status.code(), absl::StatusCode::kUnavailable);
  // Chunk i to shard i % 2: 1 and 3 move to shard 1.
  const Placement spread =
      Replaced(reg.placement(), 1, [](uint32_t id) { return id % 2; });
  std::vector<ReshardResponse> prepared;
  Replace(group, spread, 4, &prepared);
  EXPECT_EQ(prepared[0].chunks_fetched(), 0u);
  EXPECT_EQ(prepared[0].chunks_held(), 2u);
  EXPECT_EQ(prepared[1].chunks_fetched(), 2u);
  EXPECT_EQ(prepared[1].chunks_held(), 2u);
  const uint64_t slots = GetParam() == ADAM ? 2 : 1;
  // Chunks 1 (100 floats) and 3 ("b", 10 floats): values and slots.
  EXPECT_EQ(prepared[1].bytes_fetched(), (kChunkFloats + 10) * 4 * (1 + slots));
  // The refused step, retried at the old epoch: re-placed.
  auto old = StartPush(group.shard(0), reg, 0, 4, {0, 2}, 0);
  EXPECT_EQ(old->status.code(), absl::StatusCode::kAborted);
  for (uint64_t t = 4; t < 7; ++t) group.Step(reg, spread, t);
  // And back onto shard 1 alone: chunks move both ways and shard 1 keeps
  // its own.
  const Placement packed =
      Replaced(reg.placement(), 2, [](uint32_t) { return 1; });
  Replace(group, packed, 7, &prepared);
  EXPECT_EQ(prepared[1].chunks_fetched(), 2u);
  EXPECT_EQ(prepared[1].chunks_held(), 4u);
  EXPECT_EQ(prepared[0].chunks_held(), 0u);
  for (uint64_t t = 7; t < 9; ++t) group.Step(reg, packed, t);
  EXPECT_EQ(group.Params("j", packed),
            SequentialBspParams(Registration("j", spec), 2, 9));
  EXPECT_EQ(StatsOf(group.shard(0), "j").chunks(), 0u);
  EXPECT_EQ(group.shard(0).PendingWaits(), 0u);
  EXPECT_EQ(group.shard(1).PendingWaits(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, ShardReshardMoveTest,
                         ::testing::Values(SGD, ADAM));

// ASP and SSP: a pause refuses every push; a push that reached some chunks
// before it (worker 0's step 1 on chunks 0 and 1 only) and is sent again in
// full under the new placement applies once on every chunk, the moved one
// too (its dedupe state travels), and SSP's clocks carry over.
class ShardReshardAsyncTest : public ::testing::TestWithParam<ConsistencyMode> {
};

TEST_P(ShardReshardAsyncTest, APushSentAgainAfterTheMoveAppliesOnce) {
  JobSpec spec = Spec(GetParam(), 2);
  if (GetParam() == SSP) spec.mutable_consistency()->set_staleness(2);
  const RegisterJobRequest reg = OnShardZero(spec);
  ShardGroup group(2);
  ASSERT_TRUE(group.RegisterAll(reg).ok());
  auto push = [&](uint32_t shard, uint32_t worker, uint64_t step,
                  const std::vector<uint32_t>& chunks, uint64_t epoch) {
    auto call = StartPush(group.shard(shard), reg, worker, step, chunks, epoch);
    EXPECT_TRUE(call->done.WaitForNotificationWithTimeout(kReshardWait));
    return call->status;
  };
  for (uint32_t w = 0; w < 2; ++w) {
    ASSERT_TRUE(push(0, w, 0, AllChunks(), 0).ok());
  }
  ASSERT_TRUE(push(0, 0, 1, {0, 1}, 0).ok());
  std::vector<ReshardResponse> answers;
  ASSERT_TRUE(
      group.OnEvery(Phase("j", 1, ReshardRequest::PAUSE, 5), &answers).ok());
  EXPECT_TRUE(answers[0].quiesced());  // at once: nothing waits for a step
  const absl::Status paused = push(0, 0, 1, {2, 3}, 0);
  EXPECT_EQ(paused.code(), absl::StatusCode::kUnavailable) << paused;
  EXPECT_TRUE(IsPausedForReplacement(paused));
  const Placement spread =
      Replaced(reg.placement(), 1, [](uint32_t id) { return id % 2; });
  Replace(group, spread, 5);
  EXPECT_EQ(push(0, 0, 1, {0, 2}, 0).code(), absl::StatusCode::kAborted);
  // Worker 0 sends step 1 again, whole, to the new placement: chunks 0 and
  // 1 (moved) drop it as a duplicate, 2 and 3 (moved) apply it.
  ASSERT_TRUE(push(0, 0, 1, {0, 2}, 1).ok());
  ASSERT_TRUE(push(1, 0, 1, {1, 3}, 1).ok());
  EXPECT_EQ(StatsOf(group.shard(0), "j").duplicates(), 1u);
  EXPECT_EQ(StatsOf(group.shard(1), "j").duplicates(), 1u);
  // SSP (staleness 2): worker 0's step 2 needs worker 1's clock at 1, which
  // it reached before the move (at 0 it would wait): shard 0 carries its
  // clocks over, and shard 1, new to the job, takes them from the moved
  // chunks' dedupe state.
  ASSERT_TRUE(push(0, 0, 2, {0, 2}, 1).ok());
  ASSERT_TRUE(push(1, 0, 2, {1, 3}, 1).ok());
  ASSERT_TRUE(push(0, 1, 1, {0, 2}, 1).ok());
  ASSERT_TRUE(push(1, 1, 1, {1, 3}, 1).ok());
  for (const ChunkPlacement& c : spread.chunks()) {
    PullRequest req;
    req.set_job_id("j");
    req.set_placement_epoch(1);
    req.add_chunk_ids(c.chunk_id());
    PullCall call;
    group.shard(c.shard()).Pull(req, &call.resp, call.Callback());
    ASSERT_TRUE(call.status.ok()) << call.status;
    // Worker 0's steps 0, 1, 2 and worker 1's 0 and 1, each once.
    EXPECT_EQ(call.resp.parameters(0).version(), 5u)
        << "chunk " << c.chunk_id();
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ShardReshardAsyncTest,
                         ::testing::Values(ASP, SSP));

TEST(ShardReshardFetchTest, FetchesInBatchesOfTheConfiguredSize) {
  ShardOptions options;
  options.fetch_batch_bytes = 500;  // one chunk per call (800 and 80 bytes)
  ShardGroup group(2, options);
  const RegisterJobRequest reg = OnShardZero(SpecWith(SGD));
  ASSERT_TRUE(group.RegisterAll(reg).ok());
  group.Step(reg, reg.placement(), 0);
  const Placement spread =
      Replaced(reg.placement(), 1, [](uint32_t id) { return id % 2; });
  Replace(group, spread, 1);
  EXPECT_EQ(group.fetches(), 2);
  group.Step(reg, spread, 1);
  EXPECT_EQ(group.Params("j", spread),
            SequentialBspParams(Registration("j", SpecWith(SGD)), 2, 2));
}

TEST(ShardReshardFetchTest, FetchChunksNamesAChunkNotHeld) {
  ShardGroup group(2);
  const RegisterJobRequest reg = OnShardZero(SpecWith(SGD));
  ASSERT_TRUE(group.RegisterAll(reg).ok());
  group.Step(reg, reg.placement(), 0);
  ASSERT_TRUE(group.OnEvery(Phase("j", 1, ReshardRequest::PAUSE, 1)).ok());
  FetchChunksRequest fetch;
  fetch.set_job_id("j");
  fetch.set_epoch(1);
  fetch.add_chunk_ids(1);
  FetchChunksResponse resp;
  absl::Status st = group.shard(1).FetchChunks(fetch, &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("chunk_ids[0]: chunk 1 is not on"));
  fetch.set_epoch(2);  // another epoch than the pause's
  st = group.shard(0).FetchChunks(fetch, &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  fetch.set_epoch(1);
  ASSERT_TRUE(group.shard(0).FetchChunks(fetch, &resp).ok());
  ASSERT_EQ(resp.chunks_size(), 1);
  EXPECT_EQ(resp.chunks(0).version(), 1u);
  EXPECT_EQ(resp.chunks(0).values().size(), kChunkFloats * 4);
  EXPECT_TRUE(resp.chunks(0).gradient().empty());
}

TEST(ShardReshardFetchTest, OverTheBudgetThePrepareFailsAndAbortRestores) {
  ShardGroup group(2);
  // Shard 1 with a budget too small for two more chunks.
  group.Replace(1, std::make_unique<Shard>(Options(1, /*budget=*/1000)));
  const RegisterJobRequest reg = OnShardZero(SpecWith(SGD));
  ASSERT_TRUE(group.RegisterAll(reg).ok());
  group.Step(reg, reg.placement(), 0);
  ASSERT_TRUE(group.OnEvery(Phase("j", 1, ReshardRequest::PAUSE, 1)).ok());
  ReshardRequest prepare = Phase("j", 1, ReshardRequest::PREPARE);
  *prepare.mutable_placement() =
      Replaced(reg.placement(), 1, [](uint32_t id) { return id % 2; });
  const absl::Status st = group.OnEvery(prepare);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_EQ(group.fetches(), 0);
  ASSERT_TRUE(group.OnEvery(Phase("j", 1, ReshardRequest::ABORT)).ok());
  // The old placement goes on; the budget holds what it held.
  group.Step(reg, reg.placement(), 1);
  EXPECT_EQ(group.Params("j", reg.placement()),
            SequentialBspParams(Registration("j", SpecWith(SGD)), 2, 2));
  ShardStats stats;
  group.shard(1).Stats(StatsRequest(), &stats);
  EXPECT_EQ(stats.bytes_held(), 0u);
}

// A shard restarted right after the COMMIT answered restores the new
// placement from its newest checkpoint.
TEST(ShardReshardCheckpointTest, ACommittedPlacementSurvivesARestart) {
  const std::string dir = CheckpointDir("reshard_restart");
  ShardOptions options;
  options.checkpoint_dir = dir;
  ShardGroup group(2, options);
  for (uint32_t i = 0; i < 2; ++i) {
    Shard::RestoreReport report;
    ASSERT_TRUE(group.shard(i).OpenCheckpoints(&report).ok());
  }
  JobSpec spec = CheckpointSpec(BSP, /*every_steps=*/3);
  RegisterJobRequest reg = OnShardZero(spec);
  ASSERT_TRUE(group.RegisterAll(reg).ok());
  for (uint64_t t = 0; t < 2; ++t) group.Step(reg, reg.placement(), t);
  const Placement spread =
      Replaced(reg.placement(), 1, [](uint32_t id) { return id % 2; });
  Replace(group, spread, 2);
  const std::string image = CrashImage(dir, "reshard_restart_image");
  const std::vector<std::vector<float>> before = group.Params("j", spread);
  for (uint32_t i = 0; i < 2; ++i) {
    ShardOptions restarted = options;
    restarted.shard_id = i;
    restarted.checkpoint_dir = image;
    auto shard = std::make_unique<Shard>(restarted);
    Shard::RestoreReport report;
    ASSERT_TRUE(shard->OpenCheckpoints(&report).ok());
    ASSERT_EQ(report.restored.size(), 1u) << i;
    EXPECT_THAT(report.restored[0], HasSubstr("at step 2"));
    group.Replace(i, std::move(shard));
  }
  EXPECT_EQ(group.Params("j", spread), before);
  auto old = StartPull(group.shard(1), "j", 2, 0);
  EXPECT_EQ(old->status.code(), absl::StatusCode::kAborted);
  for (uint64_t t = 2; t < 4; ++t) group.Step(reg, spread, t);
  EXPECT_EQ(group.Params("j", spread),
            SequentialBspParams(Registration("j", spec), 2, 4));
}

// A shard killed between the coordinator's commit and its own COMMIT
// (shard 1: shard 0 committed) restarts from its files with the old
// placement paused at the step and the job it prepared beside it. The
// COMMIT it missed, sent again, installs that job (one of another pause
// step is refused, changing nothing), and training goes on bitwise as an
// undisturbed layout. From the same files, an ABORT instead lifts the pause
// and deletes the prepared state, after which a COMMIT is refused for good.
TEST(ShardReshardCheckpointTest, ACommitMissedByARestartIsAppliedAfterIt) {
  const std::string dir = CheckpointDir("reshard_missed_commit");
  ShardOptions options;
  options.checkpoint_dir = dir;
  ShardGroup group(2, options);
  for (uint32_t i = 0; i < 2; ++i) {
    Shard::RestoreReport report;
    ASSERT_TRUE(group.shard(i).OpenCheckpoints(&report).ok());
  }
  const JobSpec spec = CheckpointSpec(BSP, /*every_steps=*/1);
  const RegisterJobRequest reg = OnShardZero(spec);
  ASSERT_TRUE(group.RegisterAll(reg).ok());
  for (uint64_t t = 0; t < 2; ++t) group.Step(reg, reg.placement(), t);
  const Placement spread =
      Replaced(reg.placement(), 1, [](uint32_t id) { return id % 2; });
  ASSERT_TRUE(group.OnEvery(Phase("j", 1, ReshardRequest::PAUSE, 2)).ok());
  ReshardRequest prepare = Phase("j", 1, ReshardRequest::PREPARE);
  *prepare.mutable_placement() = spread;
  ASSERT_TRUE(group.OnEvery(prepare).ok());
  ReshardRequest commit = Phase("j", 1, ReshardRequest::COMMIT, 2);
  *commit.mutable_placement() = spread;
  ReshardResponse resp;
  ASSERT_TRUE(group.shard(0).Reshard(commit, &resp).ok());
  const std::string image = CrashImage(dir, "reshard_missed_commit_image");
  const std::string image2 = CrashImage(dir, "reshard_missed_commit_image2");
  ShardOptions restarted = options;
  restarted.shard_id = 1;
  restarted.checkpoint_dir = image;
  auto shard = std::make_unique<Shard>(restarted);
  Shard::RestoreReport report;
  ASSERT_TRUE(shard->OpenCheckpoints(&report).ok());
  ASSERT_EQ(report.restored.size(), 2u);
  EXPECT_THAT(report.restored[1],
              HasSubstr("placement epoch 1 prepared at step 2"));
  EXPECT_TRUE(report.problems.empty()) << report.problems[0];
  group.Replace(1, std::move(shard));
  ReshardRequest wrong = commit;
  wrong.set_pause_step(3);
  absl::Status st = group.shard(1).Reshard(wrong, &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(st.message(), HasSubstr("pause_step"));
  ASSERT_TRUE(group.shard(1).Reshard(commit, &resp).ok());
  EXPECT_EQ(resp.chunks_held(), 2u);
  for (uint64_t t = 2; t < 4; ++t) group.Step(reg, spread, t);
  EXPECT_EQ(group.Params("j", spread),
            SequentialBspParams(Registration("j", spec), 2, 4));
  EXPECT_TRUE(std::filesystem::is_empty(image + "/prepared"));

  restarted.checkpoint_dir = image2;
  Shard aborted(restarted);
  ASSERT_TRUE(aborted.OpenCheckpoints(&report).ok());
  EXPECT_FALSE(std::filesystem::is_empty(image2 + "/prepared"));
  ASSERT_TRUE(
      aborted.Reshard(Phase("j", 1, ReshardRequest::ABORT), &resp).ok());
  EXPECT_TRUE(std::filesystem::is_empty(image2 + "/prepared"));
  st = aborted.Reshard(commit, &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
}

}  // namespace
}  // namespace shard_test
}  // namespace ps
