#include "worker/client/request_plan.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct ChunkSpec {
  std::string tensor;
  uint64_t offset, length;
  uint32_t shard;
};

// Tensors a (6 floats), b (4 floats) on `shards` shards.
Assignment TwoTensors(const std::vector<ChunkSpec>& chunks,
                      uint32_t shards = 2) {
  Assignment a;
  TensorSpec* t = a.mutable_spec()->add_tensors();
  t->set_name("a");
  t->add_shape(2);
  t->add_shape(3);
  t = a.mutable_spec()->add_tensors();
  t->set_name("b");
  t->add_shape(4);
  a.mutable_placement()->set_num_shards(shards);
  for (size_t i = 0; i < chunks.size(); ++i) {
    ChunkPlacement* c = a.mutable_placement()->add_chunks();
    c->set_chunk_id(static_cast<uint32_t>(i));
    c->set_tensor(chunks[i].tensor);
    c->set_offset(chunks[i].offset);
    c->set_length(chunks[i].length);
    c->set_shard(chunks[i].shard);
  }
  for (uint32_t s = 0; s < shards; ++s) a.add_shard_addresses("x");
  return a;
}

const std::vector<ChunkSpec> kChunks = {
    {"a", 0, 2, 0}, {"a", 2, 2, 1}, {"a", 4, 2, 0}, {"b", 0, 4, 0}};

std::vector<size_t> ChunksOf(const RequestGroup& g) { return g.chunks; }

TEST(RequestPlanTest, MapsChunksOntoTheFlatVector) {
  absl::StatusOr<RequestPlan> plan =
      RequestPlan::Create(TwoTensors(kChunks), RequestPlanOptions());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->num_parameters(), 10u);
  ASSERT_EQ(plan->chunks().size(), 4u);
  EXPECT_EQ(plan->chunks()[3].flat_offset, 6u);  // b follows a
  EXPECT_EQ(plan->chunks()[2].flat_offset, 4u);
  EXPECT_EQ(plan->TensorRange("b")->first, 6u);
  EXPECT_EQ(plan->TensorRange("b")->second, 4u);
}

TEST(RequestPlanTest, GroupsPerShardUpToTheRequestSize) {
  RequestPlanOptions options;
  options.max_request_bytes = 16;  // four floats
  options.channels_per_shard = 2;
  absl::StatusOr<RequestPlan> plan =
      RequestPlan::Create(TwoTensors(kChunks), options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::vector<RequestGroup>& g = plan->model_groups();
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(g[0].shard, 0u);
  EXPECT_THAT(ChunksOf(g[0]), ElementsAre(0, 2));
  EXPECT_EQ(g[0].bytes, 16u);
  EXPECT_EQ(g[0].channel, 0);
  EXPECT_THAT(ChunksOf(g[1]), ElementsAre(3));  // would pass 16 bytes
  EXPECT_EQ(g[1].channel, 1);                   // the shard's next channel
  EXPECT_EQ(g[2].shard, 1u);
  EXPECT_THAT(ChunksOf(g[2]), ElementsAre(1));
  EXPECT_EQ(g[2].channel, 0);
}

TEST(RequestPlanTest, OversizedChunkGetsItsOwnGroup) {
  RequestPlanOptions options;
  options.max_request_bytes = 4;
  absl::StatusOr<RequestPlan> plan =
      RequestPlan::Create(TwoTensors(kChunks), options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->model_groups().size(), 4u);
}

TEST(RequestPlanTest, TensorGroupsHoldOnlyThatTensor) {
  absl::StatusOr<RequestPlan> plan =
      RequestPlan::Create(TwoTensors(kChunks), RequestPlanOptions());
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<std::vector<RequestGroup>> a = plan->TensorGroups("a");
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->size(), 2u);
  EXPECT_THAT(ChunksOf((*a)[0]), ElementsAre(0, 2));
  EXPECT_THAT(ChunksOf((*a)[1]), ElementsAre(1));
  absl::StatusOr<std::vector<RequestGroup>> none = plan->TensorGroups("c");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("\"c\""));
}

TEST(RequestPlanTest, RefusesPlacementsThatDoNotFit) {
  struct Case {
    std::string name;
    Assignment assignment;
    std::string error;
  };
  std::vector<ChunkSpec> past_end = kChunks;
  past_end[3].length = 5;
  std::vector<ChunkSpec> gap = kChunks;
  gap.pop_back();
  std::vector<ChunkSpec> bad_shard = kChunks;
  bad_shard[0].shard = 2;
  Assignment no_addresses = TwoTensors(kChunks);
  no_addresses.clear_shard_addresses();
  const std::vector<Case> cases = {
      {"past the tensor", TwoTensors(past_end), "placement.chunks[3]"},
      {"not covered", TwoTensors(gap), "covers 6 of 10"},
      {"no such shard", TwoTensors(bad_shard), "placement.chunks[0]"},
      {"addresses", no_addresses, "assignment.shard_addresses: 0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<RequestPlan> plan =
        RequestPlan::Create(c.assignment, RequestPlanOptions());
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(plan.status().message()), HasSubstr(c.error));
  }
}

TEST(RequestPlanTest, FusedTensorsShareOneRequestPerShard) {
  absl::StatusOr<RequestPlan> plan =
      RequestPlan::Create(TwoTensors(kChunks), RequestPlanOptions());
  ASSERT_TRUE(plan.ok()) << plan.status();
  // b's chunk rides with a's chunks of shard 0: 2 requests, not 3.
  absl::StatusOr<std::vector<RequestGroup>> fused =
      plan->TensorsGroups({"b", "a"});
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_EQ(fused->size(), 2u);
  EXPECT_EQ((*fused)[0].shard, 0u);
  EXPECT_THAT(ChunksOf((*fused)[0]), ElementsAre(0, 2, 3));
  EXPECT_EQ((*fused)[0].bytes, 32u);
  EXPECT_EQ((*fused)[1].shard, 1u);
  EXPECT_THAT(ChunksOf((*fused)[1]), ElementsAre(1));
  // Still cut at max_request_bytes.
  RequestPlanOptions small;
  small.max_request_bytes = 16;
  plan = RequestPlan::Create(TwoTensors(kChunks), small);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->TensorsGroups({"a", "b"})->size(), 3u);
  EXPECT_EQ(plan->TensorsGroups({"a", "nope"}).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ps
