#include "tools/psctl/psctl_export.h"

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace psctl {
namespace {

// Tensor "w" [2, 3] in chunks of 4 and 2 on two shards, "b" [3] in one.
void Layout(JobSpec* spec, Placement* placement) {
  TensorSpec* w = spec->add_tensors();
  w->set_name("w");
  w->add_shape(2);
  w->add_shape(3);
  TensorSpec* b = spec->add_tensors();
  b->set_name("b");
  b->add_shape(3);
  struct Chunk {
    const char* tensor;
    uint32_t index;
    uint64_t offset, length;
    uint32_t shard;
  };
  uint32_t id = 0;
  for (const Chunk& c : {Chunk{"w", 0, 0, 4, 0}, Chunk{"w", 1, 4, 2, 1},
                         Chunk{"b", 0, 0, 3, 1}}) {
    ChunkPlacement* p = placement->add_chunks();
    p->set_chunk_id(id++);
    p->set_tensor(c.tensor);
    p->set_index(c.index);
    p->set_offset(c.offset);
    p->set_length(c.length);
    p->set_shard(c.shard);
  }
}

std::vector<float> Floats(const NpyArray& a) {
  std::vector<float> v(a.data.size() / 4);
  std::memcpy(v.data(), a.data.data(), a.data.size());
  return v;
}

TEST(AssembleTensorsTest, PutsEachChunkAtItsOffset) {
  JobSpec spec;
  Placement placement;
  Layout(&spec, &placement);
  std::map<uint32_t, std::vector<float>> chunks = {
      {0, {1, 2, 3, 4}}, {1, {5, 6}}, {2, {-1, -2, -3}}};
  absl::StatusOr<std::vector<NpyArray>> got =
      AssembleTensors(spec, placement, chunks);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[0].name, "w");
  EXPECT_EQ((*got)[0].shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(Floats((*got)[0]), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ((*got)[1].name, "b");
  EXPECT_EQ(Floats((*got)[1]), (std::vector<float>{-1, -2, -3}));
}

TEST(AssembleTensorsTest, MissingOrMissizedChunkNamesTheTensor) {
  JobSpec spec;
  Placement placement;
  Layout(&spec, &placement);
  struct Case {
    std::map<uint32_t, std::vector<float>> chunks;
    std::string want;
  };
  for (const Case& c :
       std::vector<Case>{{{{0, {1, 2, 3, 4}}, {2, {1, 2, 3}}},
                          "tensor \"w\" chunk 1 (shard 1): missing"},
                         {{{0, {1, 2, 3, 4}}, {1, {5, 6}}, {2, {1}}},
                          "tensor \"b\" chunk 0 (shard 1): 1 values"}}) {
    absl::StatusOr<std::vector<NpyArray>> got =
        AssembleTensors(spec, placement, c.chunks);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(got.status().message().find(c.want), std::string::npos)
        << got.status();
  }
}

}  // namespace
}  // namespace psctl
}  // namespace ps
