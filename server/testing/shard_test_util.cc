#include "server/testing/shard_test_util.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/chunking.h"
#include "core/float_bytes.h"
#include "core/sparse_ids.h"
#include "gtest/gtest.h"

namespace ps {
namespace shard_test {

JobSpec Spec(ConsistencyMode mode, uint32_t workers) {
  JobSpec s;
  s.set_name("test");
  s.set_num_workers(workers);
  s.set_seed(1234);
  s.set_partition_bytes(4 * kChunkFloats);
  s.mutable_optimizer()->set_kind(SGD);
  s.mutable_optimizer()->set_learning_rate(0.1f);
  s.mutable_optimizer()->set_momentum(0.9f);
  s.mutable_consistency()->set_mode(mode);
  TensorSpec* w = s.add_tensors();
  w->set_name("w");
  w->add_shape(30);
  w->add_shape(10);
  w->mutable_init()->set_kind(GLOROT_UNIFORM);
  TensorSpec* b = s.add_tensors();
  b->set_name("b");
  b->add_shape(10);
  b->mutable_init()->set_kind(NORMAL);
  b->mutable_init()->set_scale(0.1f);
  return s;
}

JobSpec SparseSpec(ConsistencyMode mode, uint32_t workers) {
  JobSpec spec = Spec(mode, workers);
  spec.mutable_optimizer()->set_momentum(0);
  TableSpec* t = spec.add_tables();
  t->set_name("emb");
  t->set_dim(4);
  t->mutable_init()->set_kind(CONSTANT);
  t->mutable_init()->set_value(1);
  t->mutable_optimizer()->set_kind(ADAGRAD);
  t->mutable_optimizer()->set_learning_rate(0.5f);
  t->set_num_ids(1000);
  return spec;
}

// Chunk i goes to shard i % num_shards.
RegisterJobRequest Registration(const std::string& id, const JobSpec& spec,
                                uint32_t num_shards) {
  RegisterJobRequest req;
  req.set_job_id(id);
  *req.mutable_spec() = spec;
  req.set_num_workers(spec.num_workers());
  Placement* p = req.mutable_placement();
  p->set_num_shards(num_shards);
  for (ChunkPlacement& c : CutIntoChunks(spec)) {
    c.set_shard(c.chunk_id() % num_shards);
    *p->add_chunks() = c;
  }
  return req;
}

RegisterJobRequest ReplicatedOnTwo(const std::string& id, JobSpec spec) {
  spec.set_replication(2);
  RegisterJobRequest reg = Registration(id, spec, 2);
  for (ChunkPlacement& c : *reg.mutable_placement()->mutable_chunks()) {
    c.add_backups((c.shard() + 1) % 2);
  }
  return reg;
}

ShardOptions Options(uint32_t shard_id, uint64_t budget) {
  ShardOptions o;
  o.shard_id = shard_id;
  o.memory_budget_bytes = budget;
  return o;
}

SetReplicaViewRequest View(uint64_t epoch, std::vector<uint32_t> failed) {
  SetReplicaViewRequest v;
  v.set_epoch(epoch);
  for (uint32_t f : failed) v.add_failed(f);
  v.add_addresses("s0");
  v.add_addresses("s1");
  return v;
}

uint64_t ChunkLength(const RegisterJobRequest& reg, uint32_t chunk) {
  return reg.placement().chunks(chunk).length();
}

// A deterministic gradient with magnitudes over five decades, so that
// summing in another order would change the bits.
std::vector<float> Gradient(uint32_t worker, uint64_t step, uint32_t chunk,
                            uint64_t n) {
  std::vector<float> g(n);
  uint64_t z = (worker + 1) * 0x9E3779B97F4A7C15ull ^
               (step + 1) * 0xBF58476D1CE4E5B9ull ^
               (chunk + 1) * 0x94D049BB133111EBull;
  for (uint64_t i = 0; i < n; ++i) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(z >> 11) * 0x1.0p-53 - 0.5;
    const int decade = static_cast<int>((z >> 3) % 5) - 3;
    g[i] = static_cast<float>(u * std::pow(10.0, decade));
  }
  return g;
}

std::string Bytes(const std::vector<float>& v) {
  std::string out;
  EncodeFloats(v, &out);
  return out;
}

std::vector<uint64_t> IdsOfShard(uint32_t shard, uint32_t num_shards,
                                 size_t n) {
  std::vector<uint64_t> ids;
  for (uint64_t id = 0; ids.size() < n; ++id) {
    if (ShardForId(id, num_shards) == shard) ids.push_back(id);
  }
  return ids;
}

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> v(bytes.size() / 4);
  DecodeFloats(bytes, absl::MakeSpan(v));
  return v;
}

std::vector<uint32_t> AllChunks() {
  std::vector<uint32_t> ids(kNumChunks);
  std::iota(ids.begin(), ids.end(), 0);
  return ids;
}

std::unique_ptr<PushPullCall> StartPushPull(Shard& shard,
                                            const PushPullRequest& req) {
  auto call = std::make_unique<PushPullCall>();
  shard.PushPull(req, &call->resp, call->Callback());
  return call;
}

std::unique_ptr<PushPullCall> StartPushPull(Shard& shard,
                                            const RegisterJobRequest& reg,
                                            uint32_t worker, uint64_t step,
                                            uint64_t version) {
  return StartPushPull(shard, PushRequestFor<PushPullRequest>(
                                  reg, worker, step, AllChunks(), version));
}

std::unique_ptr<PullCall> StartPull(Shard& shard, const std::string& job,
                                    uint64_t step, uint64_t min_version,
                                    std::vector<uint32_t> chunk_ids) {
  PullRequest req;
  req.set_job_id(job);
  req.set_step(step);
  req.set_min_version(min_version);
  for (uint32_t c : chunk_ids) req.add_chunk_ids(c);
  auto call = std::make_unique<PullCall>();
  shard.Pull(req, &call->resp, call->Callback());
  return call;
}

// Every parameter of the job on this shard, by chunk (an immediate pull).
std::vector<std::vector<float>> Params(Shard& shard, const std::string& job) {
  auto call = StartPull(shard, job, 0, 0);
  EXPECT_TRUE(call->done.HasBeenNotified());
  EXPECT_TRUE(call->status.ok()) << call->status;
  std::vector<std::vector<float>> out;
  for (const ChunkData& d : call->resp.parameters()) {
    out.push_back(Floats(d.data()));
  }
  return out;
}

// A checksum over every parameter bit and version of the job on this shard.
uint64_t Checksum(Shard& shard, const std::string& job) {
  auto call = StartPull(shard, job, 0, 0);
  EXPECT_TRUE(call->status.ok()) << call->status;
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      h = (h ^ static_cast<const unsigned char*>(p)[i]) * 0x100000001b3ull;
    }
  };
  for (const ChunkData& d : call->resp.parameters()) {
    const uint64_t v = d.version();
    mix(&v, sizeof(v));
    mix(d.data().data(), d.data().size());
  }
  return h;
}

JobStats StatsOf(const Shard& shard, const std::string& job) {
  StatsRequest req;
  req.set_job_id(job);
  ShardStats stats;
  shard.Stats(req, &stats);
  EXPECT_EQ(stats.job_stats_size(), 1);
  return stats.job_stats_size() == 1 ? stats.job_stats(0) : JobStats();
}

uint64_t Rejected(const JobStats& s, const std::string& reason) {
  auto it = s.rejected().find(reason);
  return it == s.rejected().end() ? 0 : it->second;
}

std::string CheckpointDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(base != nullptr ? base : "/tmp", "/", name);
  std::filesystem::remove_all(dir);
  return dir;
}

// The files a kill -9 would leave: a copy of the directory right now.
std::string CrashImage(const std::string& dir, const std::string& name) {
  std::string image = CheckpointDir(name);
  std::filesystem::copy(dir, image, std::filesystem::copy_options::recursive);
  return image;
}

std::unique_ptr<Shard> CheckpointingShard(const std::string& dir,
                                          Shard::RestoreReport* report) {
  ShardOptions options;
  options.checkpoint_dir = dir;
  auto shard = std::make_unique<Shard>(options);
  absl::Status st = shard->OpenCheckpoints(report);
  EXPECT_TRUE(st.ok()) << st;
  return shard;
}

JobSpec CheckpointSpec(ConsistencyMode mode, uint32_t every_steps,
                       OptimizerKind kind) {
  JobSpec s = Spec(mode, 2);
  s.mutable_optimizer()->set_kind(kind);
  if (kind != SGD) s.mutable_optimizer()->set_momentum(0);
  s.mutable_consistency()->set_step_deadline_ms(20000);
  s.mutable_checkpoint()->set_every_steps(every_steps);
  return s;
}

// Both workers push `step` (in the given order); both answers arrive.
void BspStep(Shard& shard, const RegisterJobRequest& reg, uint64_t step,
             std::vector<uint32_t> order) {
  std::vector<std::unique_ptr<PushPullCall>> calls;
  for (uint32_t w : order)
    calls.push_back(StartPushPull(shard, reg, w, step, step));
  for (auto& c : calls) {
    ASSERT_TRUE(c->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    ASSERT_TRUE(c->status.ok()) << c->status;
    for (const ChunkData& d : c->resp.parameters()) {
      ASSERT_EQ(d.version(), step + 1);
    }
  }
}

// The same steps on a shard without checkpoints.
uint64_t ReferenceChecksum(const RegisterJobRequest& reg, uint64_t steps) {
  Shard shard(ShardOptions{});
  RegisterJobResponse resp;
  EXPECT_TRUE(shard.RegisterJob(reg, &resp).ok());
  for (uint64_t t = 0; t < steps; ++t) BspStep(shard, reg, t);
  return Checksum(shard, reg.job_id());
}

std::vector<std::vector<float>> SequentialBspParams(
    const RegisterJobRequest& reg, uint32_t workers, int steps) {
  std::vector<uint32_t> all(reg.placement().chunks_size());
  std::iota(all.begin(), all.end(), 0);
  Shard shard(ShardOptions{});
  RegisterJobResponse resp;
  EXPECT_TRUE(shard.RegisterJob(reg, &resp).ok());
  for (int t = 0; t < steps; ++t) {
    std::vector<std::unique_ptr<PushPullCall>> calls;
    for (uint32_t w = 0; w < workers; ++w) {
      calls.push_back(StartPushPull(
          shard, PushRequestFor<PushPullRequest>(reg, w, t, all, t)));
    }
    EXPECT_TRUE(calls.back()->status.ok()) << "step " << t;
  }
  return Params(shard, reg.job_id());
}

}  // namespace shard_test
}  // namespace ps
