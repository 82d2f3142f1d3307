// Shard tests. Warm starts (JobSpec.init): a job's chunks from an .npz file
// (a replicated job's backups too, but not a rejoining copy's) or from a
// job the shard holds, and every bad source refused with the shard
// unchanged.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/npz_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace shard_test {
namespace {

using ::testing::HasSubstr;

// Spec(BSP, 1)'s tensors "w" [30, 10] and "b" [10], values i * 0.5 - 7.
std::vector<NpyArray> Arrays(uint64_t w_rows = 30) {
  std::vector<NpyArray> arrays;
  for (const auto& [name, shape] :
       std::vector<std::pair<std::string, std::vector<uint64_t>>>{
           {"w", {w_rows, 10}}, {"b", {10}}}) {
    std::vector<float> v(shape.size() == 2 ? shape[0] * shape[1] : shape[0]);
    for (size_t i = 0; i < v.size(); ++i) v[i] = i * 0.5f - 7;
    arrays.push_back(NpyArray::Float32(name, shape, v));
  }
  return arrays;
}

std::string WriteFile(const std::string& name, const std::string& bytes) {
  const std::string path = absl::StrCat(testing::TempDir(), "/", name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

JobSpec FromFile(const std::string& path) {
  JobSpec spec = Spec(BSP, 1);
  spec.mutable_init()->set_from_file(path);
  return spec;
}

TEST(ShardWarmStartTest, ChunksComeFromTheFile) {
  const std::string path = WriteFile("good.npz", *EncodeNpz(Arrays()));
  for (uint32_t shards : {1u, 3u}) {
    Shard shard(Options(0));
    const RegisterJobRequest reg = Registration("j", FromFile(path), shards);
    RegisterJobResponse resp;
    ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
    auto call = StartPull(shard, "j", 0, 0);
    ASSERT_TRUE(call->status.ok());
    ASSERT_GT(call->resp.parameters_size(), 0);
    for (const ChunkData& d : call->resp.parameters()) {
      const ChunkPlacement& p = reg.placement().chunks(d.chunk_id());
      const std::vector<float> got = Floats(d.data());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i], (p.offset() + i) * 0.5f - 7) << p.tensor() << i;
      }
    }
  }
}

// Every copy, primary or backup, reads the file: whichever shard is left
// after a failover at version 0 serves what one shard without replicas
// would.
TEST(ShardWarmStartTest, EveryCopyOfAReplicatedJobComesFromTheFile) {
  const std::string path = WriteFile("replicated.npz", *EncodeNpz(Arrays()));
  Shard single(ShardOptions{});
  RegisterJobResponse resp;
  ASSERT_TRUE(
      single.RegisterJob(Registration("j", FromFile(path)), &resp).ok());
  const std::vector<std::vector<float>> want = Params(single, "j");
  const RegisterJobRequest reg = ReplicatedOnTwo("j", FromFile(path));
  for (uint32_t survivor : {0u, 1u}) {
    Shard shard(Options(survivor));
    SetReplicaViewResponse view;
    ASSERT_TRUE(shard.SetReplicaView(View(1, {}), &view).ok());
    ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
    EXPECT_EQ(resp.chunks_held(), 4u);  // 2 primaries, 2 backups
    // The other shard fails: this one serves every chunk from its copies.
    ASSERT_TRUE(shard.SetReplicaView(View(2, {1 - survivor}), &view).ok());
    EXPECT_EQ(Params(shard, "j"), want) << "shard " << survivor;
  }
}

// A copy that rejoins after a failover (RegisterJobRequest.joining) takes
// the live copies' state: the file, gone by then, is not read.
TEST(ShardWarmStartTest, ARejoiningCopyDoesNotReadTheFile) {
  RegisterJobRequest reg =
      ReplicatedOnTwo("j", FromFile("/nonexistent/gone.npz"));
  RegisterJobResponse resp;
  {
    Shard shard(Options(1));
    absl::Status st = shard.RegisterJob(reg, &resp);
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
    EXPECT_THAT(std::string(st.message()), HasSubstr("gone.npz"));
  }
  reg.set_joining(true);
  Shard shard(Options(1));
  absl::Status st = shard.RegisterJob(reg, &resp);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(resp.chunks_held(), 4u);
  // Without replicas nothing rejoins: refused, naming the field.
  RegisterJobRequest single = Registration("k", FromFile("/nonexistent/x"));
  single.set_joining(true);
  st = shard.RegisterJob(single, &resp);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("joining"));
}

// from_job with replicas: the chunks this shard is the primary of come from
// the source here (its backups' come from their primaries,
// shard_replication_warm_start_test); a placement whose primaries the
// source does not hold here is refused, the shard unchanged.
TEST(ShardWarmStartTest, AReplicatedJobsPrimariesMustBeTheSourcesChunks) {
  Shard shard(Options(0));
  RegisterJobResponse resp;
  ASSERT_TRUE(
      shard.RegisterJob(Registration("first", Spec(BSP, 1), 2), &resp).ok());
  JobSpec spec = Spec(BSP, 1);
  spec.mutable_init()->set_from_job("first");
  RegisterJobRequest moved = ReplicatedOnTwo("j", spec);
  for (ChunkPlacement& c : *moved.mutable_placement()->mutable_chunks()) {
    const uint32_t primary = c.shard();
    c.set_shard(c.backups(0));
    c.set_backups(0, primary);
  }
  absl::Status st = shard.RegisterJob(moved, &resp);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("spec.init.from_job: job \"first\" on shard 0: "
                        "tensor \"w\" chunk 1 is not the same chunk there"));
  auto call = StartPull(shard, "j", 0, 0);
  EXPECT_EQ(call->status.code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(shard.RegisterJob(ReplicatedOnTwo("j", spec), &resp).ok());
  EXPECT_EQ(resp.chunks_held(), 4u);
}

TEST(ShardWarmStartTest, ChunksComeFromAJobOnTheShard) {
  Shard shard(ShardOptions{});
  RegisterJobResponse resp;
  const RegisterJobRequest first = Registration("first", Spec(BSP, 1));
  ASSERT_TRUE(shard.RegisterJob(first, &resp).ok());
  PushResponse pushed;
  ASSERT_TRUE(
      shard
          .Push(PushRequestFor<PushRequest>(first, 0, 0, {0, 1, 2, 3}, 0),
                &pushed)
          .ok());
  JobSpec spec = Spec(BSP, 1);
  spec.mutable_init()->set_from_job("first");
  spec.mutable_init()->set_optimizer_state(true);
  ASSERT_TRUE(shard.RegisterJob(Registration("second", spec), &resp).ok());
  EXPECT_EQ(Params(shard, "second"), Params(shard, "first"));
  EXPECT_NE(Params(shard, "second"), [&] {
    Shard fresh(ShardOptions{});
    RegisterJobResponse r;
    EXPECT_TRUE(fresh.RegisterJob(first, &r).ok());
    return Params(fresh, "first");
  }()) << "the push changed nothing";
}

TEST(ShardWarmStartTest, BadSourcesAreRefusedAndLeaveTheShardAsItWas) {
  const std::string good = *EncodeNpz(Arrays());
  struct Case {
    std::string name;
    JobSpec spec;
    std::vector<std::string> named;
  };
  const std::string truncated = WriteFile("cut.npz", good.substr(0, 200));
  const std::string other = WriteFile("other.npz", *EncodeNpz(Arrays(20)));
  std::string flipped = good;
  flipped[flipped.size() / 3] ^= 0x40;
  const std::string corrupt = WriteFile("corrupt.npz", flipped);
  JobSpec no_job = Spec(BSP, 1);
  no_job.mutable_init()->set_from_job("nowhere");
  const std::vector<Case> cases = {
      {"truncated",
       FromFile(truncated),
       {"spec.init.from_file", "cut.npz", "not a zip file"}},
      {"corrupt", FromFile(corrupt), {"spec.init.from_file", "corrupt.npz"}},
      {"missing",
       FromFile("/nonexistent/m.npz"),
       {"spec.init.from_file", "/nonexistent/m.npz", "cannot open"}},
      {"shape",
       FromFile(other),
       {"spec.init.from_file", "tensor \"w\"", "[30, 10] in the job",
        "[20, 10] in", "other.npz"}},
      {"no job", no_job, {"spec.init.from_job", "\"nowhere\"", "not held"}},
  };
  for (const Case& c : cases) {
    Shard shard(ShardOptions{});
    RegisterJobResponse resp;
    absl::Status st = shard.RegisterJob(Registration("j", c.spec), &resp);
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << c.name << ": " << st;
    for (const std::string& n : c.named) {
      EXPECT_THAT(std::string(st.message()), HasSubstr(n)) << c.name;
    }
    auto call = StartPull(shard, "j", 0, 0);
    EXPECT_EQ(call->status.code(), absl::StatusCode::kFailedPrecondition)
        << c.name << ": the job is on the shard";
  }
}

}  // namespace
}  // namespace shard_test
}  // namespace ps
