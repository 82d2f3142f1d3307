// Shard tests. Registration: initial values, idempotence, the memory budget,
// bad registrations.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/init.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace shard_test {
namespace {

using ::testing::HasSubstr;

TEST(ShardRegisterTest, InitialisesChunksFromTheSeed) {
  Shard shard(ShardOptions{});
  const RegisterJobRequest reg = Registration("j", Spec(BSP, 2));
  RegisterJobResponse resp;
  ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
  EXPECT_EQ(resp.chunks_held(), 4u);
  EXPECT_GT(resp.bytes_held(), 310u * 4);
  const std::vector<std::vector<float>> params = Params(shard, "j");
  ASSERT_EQ(params.size(), 4u);
  for (uint32_t c = 0; c < 4; ++c) {
    const ChunkPlacement& p = reg.placement().chunks(c);
    const TensorSpec& t = reg.spec().tensors(p.tensor() == "w" ? 0 : 1);
    std::vector<float> want(p.length());
    ASSERT_TRUE(InitValues(1234, t, p.offset(), absl::MakeSpan(want)).ok());
    EXPECT_EQ(params[c], want) << "chunk " << c;
  }
}

// A job starts from the same parameters whatever the shard count.
TEST(ShardRegisterTest, InitialValuesIndependentOfShardCount) {
  Shard one(ShardOptions{});
  RegisterJobResponse resp;
  ASSERT_TRUE(one.RegisterJob(Registration("j", Spec(BSP, 1), 1), &resp).ok());
  const std::vector<std::vector<float>> whole = Params(one, "j");
  for (uint32_t id = 0; id < 3; ++id) {
    Shard part(Options(id));
    ASSERT_TRUE(
        part.RegisterJob(Registration("j", Spec(BSP, 1), 3), &resp).ok());
    auto call = StartPull(part, "j", 0, 0);
    ASSERT_TRUE(call->status.ok());
    for (const ChunkData& d : call->resp.parameters()) {
      EXPECT_EQ(d.chunk_id() % 3, id);
      EXPECT_EQ(Floats(d.data()), whole[d.chunk_id()]) << d.chunk_id();
    }
  }
}

TEST(ShardRegisterTest, SameSpecIsIdempotentOtherShapeIsRefused) {
  Shard shard(ShardOptions{});
  const RegisterJobRequest reg = Registration("j", Spec(ASP, 2));
  RegisterJobResponse first, again;
  ASSERT_TRUE(shard.RegisterJob(reg, &first).ok());
  PushResponse push_resp;
  ASSERT_TRUE(
      shard.Push(PushRequestFor<PushRequest>(reg, 0, 0, {0}, 0), &push_resp)
          .ok());
  const uint64_t before = Checksum(shard, "j");
  ASSERT_TRUE(shard.RegisterJob(reg, &again).ok());
  EXPECT_EQ(again.chunks_held(), first.chunks_held());
  EXPECT_EQ(again.bytes_held(), first.bytes_held());
  EXPECT_EQ(Checksum(shard, "j"), before) << "re-registration reset the job";

  JobSpec other = Spec(ASP, 2);
  other.mutable_tensors(0)->set_shape(1, 20);
  RegisterJobResponse resp;
  absl::Status st = shard.RegisterJob(Registration("j", other), &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("job \"j\" is already registered on shard 0 with "
                        "another spec"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("shape"));
  EXPECT_EQ(Checksum(shard, "j"), before);
}

TEST(ShardRegisterTest, OverBudgetIsResourceExhausted) {
  // What the job needs (parameters, momentum, one gradient per BSP worker).
  RegisterJobResponse resp;
  uint64_t need;
  {
    Shard probe(ShardOptions{});
    ASSERT_TRUE(probe.RegisterJob(Registration("j", Spec(BSP, 2)), &resp).ok());
    need = resp.bytes_held();
    EXPECT_GE(need, 310u * 4 * 4);
  }
  Shard tight(Options(0, need - 1));
  absl::Status st = tight.RegisterJob(Registration("j", Spec(BSP, 2)), &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr(absl::StrCat("job \"j\" needs ", need, " bytes")));
  EXPECT_THAT(
      std::string(st.message()),
      HasSubstr(absl::StrCat("of the ", need - 1, "-byte budget are free")));
  ShardStats stats;
  tight.Stats(StatsRequest(), &stats);
  EXPECT_EQ(stats.jobs(), 0u);
  EXPECT_EQ(stats.bytes_held(), 0u);
  EXPECT_EQ(stats.rejected().at("over_budget"), 1u);

  // Room for one job, not two, until the first is dropped.
  Shard roomy(Options(0, 2 * need - 1));
  ASSERT_TRUE(roomy.RegisterJob(Registration("a", Spec(BSP, 2)), &resp).ok());
  EXPECT_EQ(roomy.RegisterJob(Registration("b", Spec(BSP, 2)), &resp).code(),
            absl::StatusCode::kResourceExhausted);
  DropJobRequest drop;
  drop.set_job_id("a");
  ASSERT_TRUE(roomy.DropJob(drop).ok());
  EXPECT_TRUE(roomy.RegisterJob(Registration("b", Spec(BSP, 2)), &resp).ok());
}

TEST(ShardRegisterTest, BadRegistrationsNameTheField) {
  struct Case {
    std::string name;
    std::function<void(RegisterJobRequest*)> mutate;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"no_id", [](auto* r) { r->clear_job_id(); },
       "job_id: must not be empty"},
      {"no_workers",
       [](auto* r) {
         r->set_num_workers(0);
         r->mutable_spec()->set_num_workers(0);
       },
       "num_workers: must be >= 1"},
      {"workers_disagree", [](auto* r) { r->set_num_workers(3); },
       "num_workers: 3 differs from spec.num_workers 2"},
      {"bad_lr",
       [](auto* r) {
         r->mutable_spec()->mutable_optimizer()->set_learning_rate(-1);
       },
       "spec.optimizer.learning_rate: must be > 0"},
      {"backup_too_many",
       [](auto* r) {
         r->mutable_spec()->mutable_consistency()->set_backup_workers(2);
       },
       "spec.consistency.backup_workers: must be < num_workers (2), got 2"},
      {"staleness_on_bsp",
       [](auto* r) {
         r->mutable_spec()->mutable_consistency()->set_staleness(1);
       },
       "spec.consistency.staleness: only SSP"},
      {"bad_tensor",
       [](auto* r) { r->mutable_spec()->mutable_tensors(1)->set_shape(0, 0); },
       "spec.tensors[1].shape[0]: must be > 0"},
      {"placement_other_cut",
       [](auto* r) {
         r->mutable_placement()->mutable_chunks(1)->set_length(7);
       },
       "placement.chunks[1]: is (id 1, w[1], offset 100, length 7)"},
      {"placement_missing_chunk",
       [](auto* r) { r->mutable_placement()->mutable_chunks()->RemoveLast(); },
       "placement.chunks: 3 chunks, but the spec's tensors cut into 4"},
      {"placement_bad_shard",
       [](auto* r) { r->mutable_placement()->mutable_chunks(2)->set_shard(5); },
       "placement.chunks[2].shard: 5 >= num_shards 1"},
      {"placement_no_shards",
       [](auto* r) { r->mutable_placement()->set_num_shards(0); },
       "placement.num_shards: 0, but this is shard 0"},
  };
  for (const Case& c : cases) {
    Shard shard(ShardOptions{});
    RegisterJobRequest reg = Registration("j", Spec(BSP, 2));
    c.mutate(&reg);
    RegisterJobResponse resp;
    absl::Status st = shard.RegisterJob(reg, &resp);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(std::string(st.message()), HasSubstr(c.want)) << c.name;
  }
}

}  // namespace
}  // namespace shard_test
}  // namespace ps
