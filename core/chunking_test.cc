#include "core/chunking.h"

#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

JobSpec TwoLayerSpec(uint64_t partition_bytes) {
  JobSpec spec;
  spec.set_partition_bytes(partition_bytes);
  TensorSpec* w = spec.add_tensors();
  w->set_name("fc1/w");
  w->add_shape(784);
  w->add_shape(256);
  w->mutable_init()->set_kind(GLOROT_UNIFORM);
  TensorSpec* b = spec.add_tensors();
  b->set_name("fc1/b");
  b->add_shape(256);
  b->mutable_init()->set_kind(ZEROS);
  return spec;
}

struct Want {
  uint32_t chunk_id;
  std::string tensor;
  uint32_t index;
  uint64_t offset, length;
};

void ExpectChunks(const std::vector<ChunkPlacement>& got,
                  const std::vector<Want>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].chunk_id(), want[i].chunk_id) << i;
    EXPECT_EQ(got[i].tensor(), want[i].tensor) << i;
    EXPECT_EQ(got[i].index(), want[i].index) << i;
    EXPECT_EQ(got[i].offset(), want[i].offset) << i;
    EXPECT_EQ(got[i].length(), want[i].length) << i;
    EXPECT_EQ(got[i].shard(), 0u) << i;
  }
}

TEST(ChunkingTest, CutsEachTensorInOrder) {
  // 784 * 256 = 200704 floats in chunks of 65536: three full and one of 4096.
  const JobSpec spec = TwoLayerSpec(256 * 1024);
  ASSERT_TRUE(ValidateTensors(spec).ok());
  EXPECT_EQ(ChunkElements(spec), 65536u);
  ExpectChunks(CutIntoChunks(spec), {{0, "fc1/w", 0, 0, 65536},
                                     {1, "fc1/w", 1, 65536, 65536},
                                     {2, "fc1/w", 2, 131072, 65536},
                                     {3, "fc1/w", 3, 196608, 4096},
                                     {4, "fc1/b", 0, 0, 256}});
}

TEST(ChunkingTest, DefaultPartitionIsOneMebibyte) {
  const JobSpec spec = TwoLayerSpec(0);
  ASSERT_TRUE(ValidateTensors(spec).ok());
  EXPECT_EQ(ChunkElements(spec), 262144u);
  ExpectChunks(CutIntoChunks(spec),
               {{0, "fc1/w", 0, 0, 200704}, {1, "fc1/b", 0, 0, 256}});
}

TEST(ChunkingTest, ExactMultipleHasNoEmptyTail) {
  const JobSpec spec = TwoLayerSpec(256 * 4);  // the bias is exactly one chunk
  const std::vector<ChunkPlacement> chunks = CutIntoChunks(spec);
  ASSERT_EQ(chunks.size(), 200704u / 256 + 1);
  EXPECT_EQ(chunks.back().length(), 256u);
  EXPECT_EQ(chunks[chunks.size() - 2].length(), 256u);
}

TEST(ChunkingTest, RejectsBadSpecsNamingTheField) {
  struct Case {
    std::string name;
    std::function<void(JobSpec*)> mutate;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"partition_not_multiple_of_4",
       [](JobSpec* s) { s->set_partition_bytes(1001); },
       "partition_bytes: must be a multiple of 4"},
      {"partition_too_large",
       [](JobSpec* s) { s->set_partition_bytes(4ull << 20); },
       "partition_bytes: must be a multiple of 4 in [4, 3145728]"},
      {"no_tensors", [](JobSpec* s) { s->clear_tensors(); },
       "tensors: the job has none"},
      {"empty_name", [](JobSpec* s) { s->mutable_tensors(1)->clear_name(); },
       "tensors[1].name: must not be empty"},
      {"duplicate_name",
       [](JobSpec* s) { s->mutable_tensors(1)->set_name("fc1/w"); },
       "tensors[1].name: \"fc1/w\" also names tensors[0]"},
      {"empty_shape", [](JobSpec* s) { s->mutable_tensors(1)->clear_shape(); },
       "tensors[1].shape: is empty"},
      {"zero_dim", [](JobSpec* s) { s->mutable_tensors(0)->set_shape(1, 0); },
       "tensors[0].shape[1]: must be > 0"},
      {"overflow",
       [](JobSpec* s) {
         s->mutable_tensors(0)->set_shape(0, 1ull << 40);
         s->mutable_tensors(0)->set_shape(1, 1ull << 40);
       },
       "tensors[0].shape: too many elements"},
      {"too_many_chunks",
       [](JobSpec* s) {
         s->set_partition_bytes(4);
         s->mutable_tensors(0)->set_shape(0, 1ull << 20);
         s->mutable_tensors(0)->set_shape(1, 1ull << 20);
       },
       "tensors[0].shape: the job would have more than 2^32 chunks"},
      {"bad_init",
       [](JobSpec* s) { s->mutable_tensors(0)->mutable_init()->set_scale(-1); },
       "tensors[0].init.scale: GLOROT_UNIFORM takes no scale"},
  };
  for (const Case& c : cases) {
    JobSpec spec = TwoLayerSpec(0);
    c.mutate(&spec);
    absl::Status st = ValidateTensors(spec);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(std::string(st.message()), HasSubstr(c.want)) << c.name;
  }
}

}  // namespace
}  // namespace ps
