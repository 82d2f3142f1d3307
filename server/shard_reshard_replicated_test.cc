// Shard tests, live re-placement of a replicated job (JobSpec.replication
// 2) between three in-process shards that forward to and fetch from each
// other directly: the copies a shard keeps in another role are copied on
// it, those it gains fetched from the acting primary; after each move every
// copy is bitwise the same and training goes on bitwise as an undisturbed
// run, through a failover after the moves too. Refusals: a shard of the
// job failed over or joining, a replicated job not under BSP, forwards of
// another placement epoch.
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "server/testing/replication_fixture.h"
#include "server/testing/reshard_fixture.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace shard_test {
namespace {

using ::testing::HasSubstr;

// The view of shards "s0" .. "s2" at `epoch`.
SetReplicaViewRequest View3(uint64_t epoch, std::vector<uint32_t> failed,
                            std::vector<uint32_t> joining = {}) {
  SetReplicaViewRequest v = View(epoch, std::move(failed));
  v.add_addresses("s2");
  for (uint32_t j : joining) v.add_joining(j);
  return v;
}

// The ring over shards 0 .. n - 1 (PlaceChunks' for k = 2): chunk i's
// primary is shard i % n, its backup the next one.
Placement Ring(const RegisterJobRequest& reg, uint32_t n, uint64_t epoch) {
  Placement p = reg.placement();
  p.set_num_shards(3);
  p.set_epoch(epoch);
  for (ChunkPlacement& c : *p.mutable_chunks()) {
    c.set_shard(c.chunk_id() % n);
    c.clear_backups();
    c.add_backups((c.chunk_id() + 1) % n);
  }
  return p;
}

class ShardReshardReplicatedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ShardOptions o;
    o.replicate_retry = absl::Milliseconds(5);
    group_ = std::make_unique<ShardGroup>(3, o);
    for (uint32_t i = 0; i < 3; ++i) {
      group_->shard(i).SetReplicaSender([this](const std::string& address,
                                               const ReplicateRequest& req,
                                               absl::Time) {
        for (uint32_t j = 0; j < 3; ++j) {
          if (address == ShardGroup::Address(j)) {
            return group_->shard(j).Replicate(req);
          }
        }
        return absl::UnavailableError(absl::StrCat("no shard ", address));
      });
      SetView(i, View3(1, {}));
    }
    reg_ = ReplicatedRegistration();
    *reg_.mutable_placement() = Ring(reg_, 2, 0);
  }
  void TearDown() override {
    // Their forwards call each other: every replicator stops first.
    for (uint32_t i = 0; i < 3; ++i) group_->shard(i).Shutdown();
  }

  void SetView(uint32_t shard, const SetReplicaViewRequest& view) {
    SetReplicaViewResponse resp;
    ASSERT_TRUE(group_->shard(shard).SetReplicaView(view, &resp).ok());
  }

  // PAUSE at `step` (quiesced), PREPARE `to`, COMMIT, on every shard.
  void Move(const Placement& to, uint64_t step,
            std::vector<ReshardResponse>* prepared) {
    const uint64_t epoch = to.epoch();
    std::vector<ReshardResponse> answers;
    ASSERT_TRUE(
        group_
            ->OnEvery(Phase("j", epoch, ReshardRequest::PAUSE, step), &answers)
            .ok());
    for (const ReshardResponse& a : answers) ASSERT_TRUE(a.quiesced());
    ReshardRequest prepare = Phase("j", epoch, ReshardRequest::PREPARE);
    *prepare.mutable_placement() = to;
    const absl::Status st = group_->OnEvery(prepare, prepared);
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_TRUE(
        group_->OnEvery(Phase("j", epoch, ReshardRequest::COMMIT)).ok());
  }

  // Every copy of every chunk of `p`, read at `step` under a pause for
  // `epoch` (aborted after), is bitwise its primary's: values and slots.
  void ExpectCopiesEqual(const Placement& p, uint64_t epoch, uint64_t step) {
    ASSERT_TRUE(
        group_->OnEvery(Phase("j", epoch, ReshardRequest::PAUSE, step)).ok());
    for (const ChunkPlacement& c : p.chunks()) {
      std::vector<uint32_t> holders = {c.shard()};
      holders.insert(holders.end(), c.backups().begin(), c.backups().end());
      std::vector<ReplicaChunk> copies;
      for (uint32_t s : holders) {
        FetchChunksRequest req;
        req.set_job_id("j");
        req.set_epoch(epoch);
        req.add_chunk_ids(c.chunk_id());
        FetchChunksResponse resp;
        ASSERT_TRUE(group_->shard(s).FetchChunks(req, &resp).ok());
        copies.push_back(resp.chunks(0));
      }
      for (size_t i = 1; i < copies.size(); ++i) {
        SCOPED_TRACE(
            absl::StrCat("chunk ", c.chunk_id(), " on shard ", holders[i]));
        EXPECT_EQ(copies[i].version(), step);
        EXPECT_EQ(copies[i].values(), copies[0].values());
        EXPECT_EQ(copies[i].slots_size(), copies[0].slots_size());
        for (int s = 0; s < copies[i].slots_size(); ++s) {
          EXPECT_EQ(copies[i].slots(s), copies[0].slots(s));
        }
      }
    }
    ASSERT_TRUE(group_->OnEvery(Phase("j", epoch, ReshardRequest::ABORT)).ok());
  }

  std::unique_ptr<ShardGroup> group_;
  RegisterJobRequest reg_;
};

TEST_F(ShardReshardReplicatedTest, GrowsAndShrinksBitwiseWithCopiesInSync) {
  ASSERT_TRUE(group_->RegisterAll(reg_).ok());
  for (uint64_t t = 0; t < 3; ++t) group_->Step(reg_, reg_.placement(), t);
  // Onto three shards: chunk 0 stays (0, 1); chunk 1 (1, 0) -> (1, 2): shard
  // 1 keeps it as primary, shard 2 fetches it; chunk 2 (0, 1) -> (2, 0):
  // shard 0 keeps it as backup, shard 2 fetches it; chunk 3 (1, 0) -> (0,
  // 1): both keep it, in swapped roles.
  const Placement three = Ring(reg_, 3, 1);
  std::vector<ReshardResponse> prepared;
  Move(three, 3, &prepared);
  EXPECT_EQ(prepared[0].chunks_fetched(), 0u);
  EXPECT_EQ(prepared[0].chunks_held(), 3u);
  EXPECT_EQ(prepared[1].chunks_fetched(), 0u);
  EXPECT_EQ(prepared[1].chunks_held(), 3u);
  EXPECT_EQ(prepared[2].chunks_fetched(), 2u);
  EXPECT_EQ(prepared[2].chunks_held(), 2u);
  for (uint64_t t = 3; t < 6; ++t) group_->Step(reg_, three, t);
  EXPECT_EQ(group_->Params("j", three), Reference(6));
  ExpectCopiesEqual(three, 2, 6);
  // And back onto two: shard 2's copies leave.
  const Placement two = Ring(reg_, 2, 2);
  Move(two, 6, &prepared);
  EXPECT_EQ(prepared[2].chunks_held(), 0u);
  EXPECT_EQ(prepared[0].chunks_fetched() + prepared[1].chunks_fetched(), 2u);
  for (uint64_t t = 6; t < 8; ++t) group_->Step(reg_, two, t);
  EXPECT_EQ(group_->Params("j", two), Reference(8));
  ExpectCopiesEqual(two, 3, 8);
  EXPECT_EQ(StatsOf(group_->shard(2), "j").chunks(), 0u);
  // Shard 1 fails over: shard 0 serves every chunk from its copies.
  SetView(0, View3(2, {1}));
  SetView(2, View3(2, {1}));
  Placement survivors = two;
  for (ChunkPlacement& c : *survivors.mutable_chunks()) c.set_shard(0);
  for (uint64_t t = 8; t < 10; ++t) group_->Step(reg_, survivors, t);
  EXPECT_EQ(group_->Params("j", survivors), Reference(10));
}

TEST_F(ShardReshardReplicatedTest, RefusesWhileAShardOfTheJobIsOutOfService) {
  ASSERT_TRUE(group_->RegisterAll(reg_).ok());
  group_->Step(reg_, reg_.placement(), 0);
  const Placement three = Ring(reg_, 3, 1);
  // Shard 2 joining: the job is not on it, so it pauses, but the new
  // placement's copies there are refused.
  for (uint32_t i = 0; i < 3; ++i) SetView(i, View3(2, {}, {2}));
  ASSERT_TRUE(group_->OnEvery(Phase("j", 1, ReshardRequest::PAUSE, 1)).ok());
  ReshardRequest prepare = Phase("j", 1, ReshardRequest::PREPARE);
  *prepare.mutable_placement() = three;
  absl::Status st = group_->OnEvery(prepare);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("shard 2 holds a copy"));
  EXPECT_THAT(st.message(), HasSubstr("joining"));
  ASSERT_TRUE(group_->OnEvery(Phase("j", 1, ReshardRequest::ABORT)).ok());
  // Shard 1 failed over: not even paused.
  for (uint32_t i = 0; i < 3; ++i) SetView(i, View3(3, {1}));
  ReshardResponse resp;
  st = group_->shard(0).Reshard(Phase("j", 1, ReshardRequest::PAUSE, 2), &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("shard 1 holds a copy"));
  EXPECT_THAT(st.message(), HasSubstr("failed over"));
  EXPECT_EQ(StatsOf(group_->shard(0), "j").chunks(), 4u);
}

TEST_F(ShardReshardReplicatedTest, RefusesAReplicatedJobNotUnderBsp) {
  RegisterJobRequest asp = ReplicatedRegistration(ASP);
  *asp.mutable_placement() = Ring(asp, 2, 0);
  ASSERT_TRUE(group_->RegisterAll(asp).ok());
  ReshardResponse resp;
  const absl::Status st =
      group_->shard(0).Reshard(Phase("j", 1, ReshardRequest::PAUSE, 1), &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("spec.consistency.mode"));
}

// A forward of a placement the backup has not committed yet is retried
// (UNAVAILABLE); one of the placement it replaced is refused.
TEST_F(ShardReshardReplicatedTest, RefusesForwardsOfAnotherPlacementEpoch) {
  ASSERT_TRUE(group_->RegisterAll(reg_).ok());
  group_->Step(reg_, reg_.placement(), 0);
  ReplicateRequest req;
  req.set_job_id("j");
  req.set_epoch(1);
  req.set_from_shard(1);
  req.set_placement_epoch(1);
  ReplicaChunk* c = req.add_chunks();
  c->set_chunk_id(1);  // primary 1, backup 0
  c->set_version(7);
  c->set_values(Bytes(std::vector<float>(kChunkFloats, 1.0f)));
  c->add_slots(Bytes(std::vector<float>(kChunkFloats, 0.0f)));
  absl::Status st = group_->shard(0).Replicate(req);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(st.message(), HasSubstr("placement_epoch: 1 > 0"));
  Move(Ring(reg_, 2, 1), 1, nullptr);
  req.set_placement_epoch(0);
  st = group_->shard(0).Replicate(req);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("placement_epoch: 0 < 1"));
  req.set_placement_epoch(1);
  EXPECT_TRUE(group_->shard(0).Replicate(req).ok());  // now it is taken
}

}  // namespace
}  // namespace shard_test
}  // namespace ps
