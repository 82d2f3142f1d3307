#include "server/shard.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/chunking.h"
#include "core/float_bytes.h"
#include "core/init.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/checkpoint.h"
#include "server/optimizer.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------
// Helpers.

// Chunks of 100 floats: "w" [30, 10] cuts into chunks 0..2, "b" [10] is
// chunk 3.
constexpr uint64_t kChunkFloats = 100;
constexpr int kNumChunks = 4;

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

// Chunk i goes to shard i % num_shards.
RegisterJobRequest Registration(const std::string& id, const JobSpec& spec,
                                uint32_t num_shards = 1) {
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

ShardOptions Options(uint32_t shard_id, uint64_t budget = 8ull << 30) {
  ShardOptions o;
  o.shard_id = shard_id;
  o.memory_budget_bytes = budget;
  return o;
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

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> v(bytes.size() / 4);
  DecodeFloats(bytes, absl::MakeSpan(v));
  return v;
}

// Gradients of `worker` for `step` on `chunks`, each tagged with `version`.
template <typename Req>
Req PushRequestFor(const RegisterJobRequest& reg, uint32_t worker,
                   uint64_t step, const std::vector<uint32_t>& chunks,
                   uint64_t version) {
  Req req;
  req.set_job_id(reg.job_id());
  req.set_worker(worker);
  req.set_step(step);
  for (uint32_t c : chunks) {
    ChunkData* g = req.add_gradients();
    g->set_chunk_id(c);
    g->set_version(version);
    g->set_data(Bytes(Gradient(worker, step, c, ChunkLength(reg, c))));
  }
  return req;
}

std::vector<uint32_t> AllChunks() {
  std::vector<uint32_t> ids(kNumChunks);
  std::iota(ids.begin(), ids.end(), 0);
  return ids;
}

// One asynchronous call: the callback records the status and notifies.
template <typename Resp>
struct Call {
  absl::Notification done;
  absl::Status status;
  Resp resp;
  std::function<void(absl::Status)> Callback() {
    return [this](absl::Status s) {
      status = std::move(s);
      done.Notify();
    };
  }
};
using PushPullCall = Call<PushPullResponse>;
using PullCall = Call<PullResponse>;

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
                                    std::vector<uint32_t> chunk_ids = {}) {
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

// ---------------------------------------------------------------------------
// Registration.

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

// ---------------------------------------------------------------------------
// BSP.

// Runs `steps` BSP steps of `workers` workers, pushing each step in the
// order `order` (a permutation of the ranks); returns the final parameters.
std::vector<std::vector<float>> RunBsp(const std::vector<uint32_t>& order,
                                       int steps, OptimizerKind kind) {
  Shard shard(ShardOptions{});
  JobSpec spec = Spec(BSP, order.size());
  spec.mutable_optimizer()->set_kind(kind);
  if (kind != SGD) spec.mutable_optimizer()->clear_momentum();
  const RegisterJobRequest reg = Registration("j", spec);
  RegisterJobResponse resp;
  EXPECT_TRUE(shard.RegisterJob(reg, &resp).ok());
  for (int t = 0; t < steps; ++t) {
    std::vector<std::unique_ptr<PushPullCall>> calls;
    for (size_t i = 0; i < order.size(); ++i) {
      calls.push_back(StartPushPull(shard, reg, order[i], t, t));
      // Nobody is answered before the last push of the step.
      EXPECT_EQ(calls.back()->done.HasBeenNotified(), i + 1 == order.size());
    }
    for (auto& call : calls) {
      EXPECT_TRUE(call->done.HasBeenNotified());
      EXPECT_TRUE(call->status.ok()) << call->status;
      EXPECT_EQ(call->resp.parameters_size(), kNumChunks);
      for (const ChunkData& d : call->resp.parameters()) {
        EXPECT_EQ(d.version(), static_cast<uint64_t>(t + 1));
      }
    }
  }
  EXPECT_EQ(shard.PendingWaits(), 0u);
  return Params(shard, "j");
}

// The RPC layer's path: pushes hand over their payload buffers and replies
// take the encoded parameters as shared payloads. It ends bitwise where the
// copying path does; both BSP workers' replies of a version share one buffer
// with the bytes the copying path writes; a reply still holding a version's
// buffer never sees it rewritten by the next version.
TEST(ShardPayloadTest, RepliesOfOneVersionShareOneImmutableEncoding) {
  Shard shard(ShardOptions{});
  Shard copying(ShardOptions{});
  const RegisterJobRequest reg = Registration("j", Spec(BSP, 2));
  RegisterJobResponse rr;
  ASSERT_TRUE(shard.RegisterJob(reg, &rr).ok());
  ASSERT_TRUE(copying.RegisterJob(reg, &rr).ok());
  std::vector<Shard::SharedBytes> held;  // version 1's, kept past step 1
  for (uint64_t step = 0; step < 3; ++step) {
    PushPullCall a, b;
    std::vector<Shard::SharedBytes> pa, pb;
    // Worker 1 first: the sum must still be in rank order.
    PushPullRequest r1 =
        PushRequestFor<PushPullRequest>(reg, 1, step, AllChunks(), step);
    PushPullRequest r0 =
        PushRequestFor<PushPullRequest>(reg, 0, step, AllChunks(), step);
    auto c1 = StartPushPull(copying, r1);
    auto c0 = StartPushPull(copying, r0);
    ASSERT_TRUE(c0->status.ok() && c1->status.ok());
    shard.PushPull(&r1, &b.resp, b.Callback(), &pb);
    EXPECT_FALSE(b.done.HasBeenNotified());
    shard.PushPull(&r0, &a.resp, a.Callback(), &pa);
    ASSERT_TRUE(a.done.HasBeenNotified() && b.done.HasBeenNotified());
    ASSERT_TRUE(a.status.ok() && b.status.ok()) << a.status << b.status;
    const std::vector<std::vector<float>> want = Params(shard, "j");
    ASSERT_EQ(pa.size(), static_cast<size_t>(kNumChunks));
    ASSERT_EQ(pb.size(), pa.size());
    for (int c = 0; c < kNumChunks; ++c) {
      EXPECT_TRUE(a.resp.parameters(c).data().empty());
      EXPECT_EQ(a.resp.parameters(c).version(), step + 1);
      EXPECT_EQ(pa[c].get(), pb[c].get()) << "chunk " << c;
      EXPECT_EQ(Floats(*pa[c]), want[c]) << "chunk " << c;
    }
    if (step == 0) {
      held = pa;
    } else {
      for (int c = 0; c < kNumChunks; ++c) {
        EXPECT_NE(held[c].get(), pa[c].get());
        EXPECT_NE(Floats(*held[c]), want[c]) << "version 1 was rewritten";
      }
    }
    EXPECT_EQ(Checksum(shard, "j"), Checksum(copying, "j")) << "step " << step;
  }
}

TEST(ShardBspTest, BitwiseIdenticalWhateverTheArrivalOrder) {
  for (OptimizerKind kind : {SGD, ADAM}) {
    std::vector<uint32_t> order = {0, 1, 2, 3};
    const std::vector<std::vector<float>> want = RunBsp(order, 3, kind);
    int permutations = 0;
    while (std::next_permutation(order.begin(), order.end())) {
      const std::vector<std::vector<float>> got = RunBsp(order, 3, kind);
      ASSERT_EQ(got.size(), want.size());
      for (size_t c = 0; c < got.size(); ++c) {
        ASSERT_EQ(std::memcmp(got[c].data(), want[c].data(),
                              got[c].size() * sizeof(float)),
                  0)
            << OptimizerKind_Name(kind) << " chunk " << c << " order "
            << order[0] << order[1] << order[2] << order[3];
      }
      ++permutations;
    }
    EXPECT_EQ(permutations, 23);
  }
}

// One step equals the optimizer applied to the rank-order sum divided by
// the worker count.
TEST(ShardBspTest, AppliesTheMeanGradient) {
  Shard shard(ShardOptions{});
  const RegisterJobRequest reg = Registration("j", Spec(BSP, 3));
  RegisterJobResponse resp;
  ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
  const std::vector<std::vector<float>> before = Params(shard, "j");
  auto a = StartPushPull(shard, reg, 2, 0, 0);
  auto b = StartPushPull(shard, reg, 0, 0, 0);
  auto c = StartPushPull(shard, reg, 1, 0, 0);
  ASSERT_TRUE(c->done.HasBeenNotified() && c->status.ok());

  auto opt = Optimizer::Create(reg.spec().optimizer());
  ASSERT_TRUE(opt.ok());
  for (uint32_t chunk = 0; chunk < kNumChunks; ++chunk) {
    const uint64_t n = ChunkLength(reg, chunk);
    std::vector<float> sum = Gradient(0, 0, chunk, n);
    for (uint32_t w : {1, 2}) {
      const std::vector<float> g = Gradient(w, 0, chunk, n);
      for (uint64_t i = 0; i < n; ++i) sum[i] += g[i];
    }
    std::vector<float> want = before[chunk];
    OptimizerState state = (*opt)->NewState(n);
    (*opt)->Apply(absl::MakeSpan(want), sum.data(), 1.0f / 3, &state);
    EXPECT_EQ(Floats(a->resp.parameters(chunk).data()), want) << chunk;
    EXPECT_EQ(a->resp.parameters(chunk).chunk_id(), chunk);
  }
}

TEST(ShardBspTest, DuplicatesWaitAndAreCountedStaleAnsweredAtOnce) {
  Shard shard(ShardOptions{});
  const RegisterJobRequest reg = Registration("j", Spec(BSP, 2));
  RegisterJobResponse resp;
  ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
  auto first = StartPushPull(shard, reg, 0, 0, 0);
  auto retry = StartPushPull(shard, reg, 0, 0, 0);  // same (worker, step)
  EXPECT_FALSE(first->done.HasBeenNotified());
  EXPECT_FALSE(retry->done.HasBeenNotified());
  EXPECT_EQ(shard.PendingWaits(), 2u);
  EXPECT_EQ(StatsOf(shard, "j").duplicates(), 4u);
  EXPECT_THAT(StatsOf(shard, "j").missing_workers(), ElementsAre(1));

  auto other = StartPushPull(shard, reg, 1, 0, 0);
  for (auto* call : {first.get(), retry.get(), other.get()}) {
    ASSERT_TRUE(call->done.HasBeenNotified());
    ASSERT_TRUE(call->status.ok());
    EXPECT_EQ(call->resp.parameters(0).version(), 1u);
  }
  EXPECT_EQ(first->resp.duplicates(), 0u);
  EXPECT_EQ(retry->resp.duplicates(), 4u);
  // Identical answers: the duplicate was not added a second time.
  EXPECT_EQ(first->resp.parameters(0).data(), retry->resp.parameters(0).data());

  // A retry after the step was applied is stale: answered at once.
  const uint64_t before = Checksum(shard, "j");
  auto late = StartPushPull(shard, reg, 0, 0, 0);
  ASSERT_TRUE(late->done.HasBeenNotified());
  ASSERT_TRUE(late->status.ok());
  EXPECT_EQ(late->resp.stale(), 4u);
  EXPECT_EQ(late->resp.parameters(0).version(), 1u);
  EXPECT_EQ(Checksum(shard, "j"), before);

  const JobStats s = StatsOf(shard, "j");
  EXPECT_EQ(s.duplicates(), 4u);
  EXPECT_EQ(s.stale_pushes(), 4u);
  EXPECT_EQ(s.pushes(), 8u);  // 2 workers x 4 chunks accepted
  EXPECT_EQ(s.applies(), 4u);
  EXPECT_EQ(shard.PendingWaits(), 0u);
}

TEST(ShardBspTest, BackupWorkerLatePushIsStaleAndAnswered) {
  Shard shard(ShardOptions{});
  JobSpec spec = Spec(BSP, 3);
  spec.mutable_consistency()->set_backup_workers(1);
  const RegisterJobRequest reg = Registration("j", spec);
  RegisterJobResponse resp;
  ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
  const std::vector<std::vector<float>> before = Params(shard, "j");

  auto w2 = StartPushPull(shard, reg, 2, 0, 0);
  EXPECT_FALSE(w2->done.HasBeenNotified());
  auto w0 = StartPushPull(shard, reg, 0, 0, 0);  // quorum: 3 - 1 = 2
  ASSERT_TRUE(w2->done.HasBeenNotified() && w0->done.HasBeenNotified());
  EXPECT_EQ(w0->resp.parameters(0).version(), 1u);

  // The step averaged ranks 0 and 2 only.
  auto opt = Optimizer::Create(reg.spec().optimizer());
  std::vector<float> want = before[0];
  std::vector<float> sum = Gradient(0, 0, 0, kChunkFloats);
  const std::vector<float> g2 = Gradient(2, 0, 0, kChunkFloats);
  for (size_t i = 0; i < sum.size(); ++i) sum[i] += g2[i];
  OptimizerState state = (*opt)->NewState(kChunkFloats);
  (*opt)->Apply(absl::MakeSpan(want), sum.data(), 0.5f, &state);
  EXPECT_EQ(Floats(w0->resp.parameters(0).data()), want);

  const uint64_t after_step = Checksum(shard, "j");
  auto late = StartPushPull(shard, reg, 1, 0, 0);
  ASSERT_TRUE(late->done.HasBeenNotified());
  ASSERT_TRUE(late->status.ok()) << late->status;
  EXPECT_EQ(late->resp.stale(), 4u);
  EXPECT_EQ(late->resp.parameters(0).version(), 1u);
  EXPECT_EQ(Floats(late->resp.parameters(0).data()), want);
  EXPECT_EQ(Checksum(shard, "j"), after_step);
  EXPECT_EQ(StatsOf(shard, "j").stale_pushes(), 4u);
  EXPECT_EQ(StatsOf(shard, "j").workers(1).staleness(), 1u);
}

TEST(ShardBspTest, PullWaitsForMinVersion) {
  Shard shard(ShardOptions{});
  const RegisterJobRequest reg = Registration("j", Spec(BSP, 1));
  RegisterJobResponse resp;
  ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
  auto pull = StartPull(shard, "j", 1, 1, {3, 1});
  EXPECT_FALSE(pull->done.HasBeenNotified());
  auto push = StartPushPull(shard, reg, 0, 0, 0);
  ASSERT_TRUE(pull->done.HasBeenNotified());
  ASSERT_TRUE(pull->status.ok());
  ASSERT_EQ(pull->resp.parameters_size(), 2);
  EXPECT_EQ(pull->resp.parameters(0).chunk_id(), 3u);
  EXPECT_EQ(pull->resp.parameters(1).chunk_id(), 1u);
  EXPECT_EQ(pull->resp.parameters(0).version(), 1u);
  EXPECT_EQ(pull->resp.parameters(1).data(), push->resp.parameters(1).data());
}

TEST(ShardBspTest, MembershipShrinkCompletesThePendingStep) {
  Shard shard(ShardOptions{});
  const RegisterJobRequest reg = Registration("j", Spec(BSP, 3));
  RegisterJobResponse resp;
  ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
  auto w0 = StartPushPull(shard, reg, 0, 0, 0);
  auto w1 = StartPushPull(shard, reg, 1, 0, 0);
  EXPECT_FALSE(w0->done.HasBeenNotified());
  EXPECT_THAT(StatsOf(shard, "j").missing_workers(), ElementsAre(2));

  SetMembershipRequest m;
  m.set_job_id("j");
  m.add_active_workers(1);
  m.add_active_workers(0);
  ASSERT_TRUE(shard.SetMembership(m).ok());
  ASSERT_TRUE(w0->done.HasBeenNotified() && w1->done.HasBeenNotified());
  EXPECT_EQ(w1->resp.parameters(0).version(), 1u);

  // Rank 2 is out: its pushes are refused, and step 1 needs only 0 and 1.
  const uint64_t before = Checksum(shard, "j");
  auto w2 = StartPushPull(shard, reg, 2, 1, 1);
  EXPECT_EQ(w2->status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(w2->status.message()),
              HasSubstr("worker: rank 2 is not an active member of job \"j\""));
  EXPECT_EQ(Checksum(shard, "j"), before);
  auto a = StartPushPull(shard, reg, 0, 1, 1);
  auto b = StartPushPull(shard, reg, 1, 1, 1);
  ASSERT_TRUE(a->done.HasBeenNotified() && b->status.ok());
  EXPECT_EQ(b->resp.parameters(0).version(), 2u);
  const JobStats s = StatsOf(shard, "j");
  EXPECT_FALSE(s.workers(2).active());
  EXPECT_TRUE(s.workers(0).active());
  EXPECT_EQ(Rejected(s, "inactive_worker"), 1u);

  for (const auto& bad :
       std::vector<std::vector<uint32_t>>{{}, {0, 3}, {1, 1}}) {
    SetMembershipRequest r;
    r.set_job_id("j");
    for (uint32_t w : bad) r.add_active_workers(w);
    EXPECT_EQ(shard.SetMembership(r).code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(ShardBspTest, DeadlineNamesTheMissingWorkers) {
  Shard shard(ShardOptions{});
  const RegisterJobRequest reg = Registration("j", Spec(BSP, 3));
  RegisterJobResponse resp;
  ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
  std::vector<std::unique_ptr<PushPullCall>> step0;
  for (uint32_t w : {0, 1, 2})
    step0.push_back(StartPushPull(shard, reg, w, 0, 0));
  ASSERT_TRUE(step0[0]->status.ok());
  // Step 1: only worker 0 pushes.
  auto call = StartPushPull(shard, reg, 0, 1, 1);
  shard.CheckDeadlines(absl::Now());
  EXPECT_FALSE(call->done.HasBeenNotified());
  shard.CheckDeadlines(absl::Now() + absl::Seconds(61));
  ASSERT_TRUE(call->done.HasBeenNotified());
  EXPECT_EQ(call->status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(call->status.message(),
            "job j step 1: no gradient from workers 1, 2 after 60000 ms");
  EXPECT_EQ(shard.PendingWaits(), 0u);

  // The configured deadline is honoured.
  JobSpec quick = Spec(BSP, 2);
  quick.mutable_consistency()->set_step_deadline_ms(500);
  const RegisterJobRequest reg2 = Registration("quick", quick);
  ASSERT_TRUE(shard.RegisterJob(reg2, &resp).ok());
  auto q = StartPushPull(shard, reg2, 1, 0, 0);
  shard.CheckDeadlines(absl::Now() + absl::Seconds(1));
  ASSERT_TRUE(q->done.HasBeenNotified());
  EXPECT_EQ(q->status.message(),
            "job quick step 0: no gradient from worker 0 after 500 ms");
}

TEST(ShardBspTest, DropAndShutdownFailPendingWaits) {
  Shard shard(ShardOptions{});
  RegisterJobResponse resp;
  const RegisterJobRequest a = Registration("a", Spec(BSP, 2));
  const RegisterJobRequest b = Registration("b", Spec(BSP, 2));
  ASSERT_TRUE(shard.RegisterJob(a, &resp).ok());
  ASSERT_TRUE(shard.RegisterJob(b, &resp).ok());
  auto wa = StartPushPull(shard, a, 0, 0, 0);
  auto wb = StartPushPull(shard, b, 0, 0, 0);
  EXPECT_EQ(shard.PendingWaits(), 2u);
  DropJobRequest drop;
  drop.set_job_id("a");
  ASSERT_TRUE(shard.DropJob(drop).ok());
  ASSERT_TRUE(wa->done.HasBeenNotified());
  EXPECT_EQ(wa->status.code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(shard.DropJob(drop).ok()) << "a retried drop succeeds";
  auto gone = StartPushPull(shard, a, 1, 0, 0);
  EXPECT_EQ(gone->status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(gone->status.message()),
              HasSubstr("job_id: no job \"a\" on shard 0"));

  EXPECT_FALSE(wb->done.HasBeenNotified());
  shard.Shutdown();
  ASSERT_TRUE(wb->done.HasBeenNotified());
  EXPECT_EQ(wb->status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(shard.PendingWaits(), 0u);
  auto after = StartPushPull(shard, b, 1, 0, 0);
  EXPECT_EQ(after->status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(shard.RegisterJob(a, &resp).code(), absl::StatusCode::kUnavailable);
}

TEST(ShardBspTest, DestructionFailsPendingWaits) {
  std::unique_ptr<PushPullCall> call;
  {
    Shard shard(ShardOptions{});
    const RegisterJobRequest reg = Registration("j", Spec(BSP, 2));
    RegisterJobResponse resp;
    ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
    call = StartPushPull(shard, reg, 0, 0, 0);
    EXPECT_FALSE(call->done.HasBeenNotified());
  }
  ASSERT_TRUE(call->done.HasBeenNotified());
  EXPECT_EQ(call->status.code(), absl::StatusCode::kUnavailable);
}

// ---------------------------------------------------------------------------
// ASP and SSP.

TEST(ShardAspTest, AppliesOnArrivalAndRecordsStaleness) {
  Shard shard(ShardOptions{});
  JobSpec spec = Spec(ASP, 2);
  spec.mutable_optimizer()->clear_momentum();
  const RegisterJobRequest reg = Registration("j", spec);
  RegisterJobResponse resp;
  ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
  const std::vector<float> p0 = Params(shard, "j")[0];

  // Both workers computed step 0 against version 0.
  auto a = StartPushPull(shard, reg, 0, 0, 0);
  ASSERT_TRUE(a->done.HasBeenNotified() && a->status.ok());
  EXPECT_EQ(a->resp.parameters(0).version(), 1u);
  // Applied undivided: p - lr * g.
  const std::vector<float> g = Gradient(0, 0, 0, kChunkFloats);
  std::vector<float> want = p0;
  for (size_t i = 0; i < want.size(); ++i) want[i] = want[i] - 0.1f * g[i];
  EXPECT_EQ(Floats(a->resp.parameters(0).data()), want);

  auto b = StartPushPull(shard, reg, 1, 0, 0);  // staleness 1
  ASSERT_TRUE(b->done.HasBeenNotified());
  EXPECT_EQ(b->resp.parameters(0).version(), 2u);
  auto c = StartPushPull(shard, reg, 0, 1, 1);  // staleness 1
  auto d = StartPushPull(shard, reg, 1, 1, 0);  // staleness 3
  auto e = StartPushPull(shard, reg, 0, 2, 4);  // staleness 0
  ASSERT_TRUE(e->done.HasBeenNotified() && e->status.ok());
  EXPECT_EQ(e->resp.parameters(0).version(), 5u);

  const JobStats s = StatsOf(shard, "j");
  EXPECT_EQ(s.mode(), ASP);
  // Per chunk: staleness 0, 1, 1, 3, 0 -> buckets [0]: 2, [1,2): 2, [2,4): 1.
  ASSERT_GE(s.staleness().counts_size(), 3);
  EXPECT_EQ(s.staleness().counts(0), 2u * kNumChunks);
  EXPECT_EQ(s.staleness().counts(1), 2u * kNumChunks);
  EXPECT_EQ(s.staleness().counts(2), 1u * kNumChunks);
  EXPECT_EQ(s.workers(1).staleness(), 3u);
  EXPECT_EQ(s.workers(0).staleness(), 0u);
  EXPECT_EQ(s.version(), 5u);
  EXPECT_EQ(s.applies(), 5u * kNumChunks);

  // A retry of an applied (worker, step) is a duplicate.
  const uint64_t before = Checksum(shard, "j");
  auto retry = StartPushPull(shard, reg, 0, 2, 4);
  EXPECT_EQ(retry->resp.duplicates(), 4u);
  EXPECT_EQ(Checksum(shard, "j"), before);
}

TEST(ShardSspTest, BlocksAtStalenessPlusOneAndReleasesWhenSlowestAdvances) {
  constexpr uint32_t kS = 2;
  Shard shard(ShardOptions{});
  JobSpec spec = Spec(SSP, 2);
  spec.mutable_consistency()->set_staleness(kS);
  const RegisterJobRequest reg = Registration("j", spec);
  RegisterJobResponse resp;
  ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());

  // Worker 0 runs ahead while worker 1 has pushed nothing.
  for (uint64_t t = 0; t < kS; ++t) {
    auto call = StartPushPull(shard, reg, 0, t, t);
    ASSERT_TRUE(call->done.HasBeenNotified()) << "step " << t;
    ASSERT_TRUE(call->status.ok());
  }
  // Its step s + 1 - 1 = 2 reply (for step 3) would be 3 ahead of the
  // slowest: it waits, with its gradient already applied.
  auto blocked = StartPushPull(shard, reg, 0, kS, kS);
  EXPECT_FALSE(blocked->done.HasBeenNotified());
  EXPECT_EQ(shard.PendingWaits(), 1u);
  EXPECT_EQ(StatsOf(shard, "j").version(), kS + 1);
  auto pull = StartPull(shard, "j", kS + 1, 0);  // the same bound for Pull
  EXPECT_FALSE(pull->done.HasBeenNotified());

  // The slowest advances one step: both are released.
  auto slow = StartPushPull(shard, reg, 1, 0, 0);
  ASSERT_TRUE(slow->done.HasBeenNotified());
  ASSERT_TRUE(blocked->done.HasBeenNotified());
  ASSERT_TRUE(blocked->status.ok()) << blocked->status;
  ASSERT_TRUE(pull->done.HasBeenNotified());
  EXPECT_EQ(blocked->resp.parameters(0).version(), kS + 2);
  EXPECT_EQ(shard.PendingWaits(), 0u);

  // Worker 0's next step blocks again until worker 1 pushes its step 1.
  auto next = StartPushPull(shard, reg, 0, kS + 1, kS + 2);
  EXPECT_FALSE(next->done.HasBeenNotified());
  const JobStats s = StatsOf(shard, "j");
  EXPECT_EQ(s.step(), 1u);  // the slowest worker pushed 1 step
  EXPECT_EQ(s.workers(0).last_step(), kS + 1);
  auto slow2 = StartPushPull(shard, reg, 1, 1, 1);
  EXPECT_TRUE(next->done.HasBeenNotified());

  // A deadline names the worker holding the wait back.
  auto stuck = StartPushPull(shard, reg, 0, kS + 2, kS + 4);
  EXPECT_FALSE(stuck->done.HasBeenNotified());
  shard.CheckDeadlines(absl::Now() + absl::Minutes(2));
  ASSERT_TRUE(stuck->done.HasBeenNotified());
  EXPECT_EQ(stuck->status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(
      std::string(stuck->status.message()),
      HasSubstr("job j step 2: no gradient from worker 1 after 60000 ms"));
}

// ---------------------------------------------------------------------------
// Bad input.

TEST(ShardBadInputTest, RejectedWholeNamedCountedAndNothingChanges) {
  // Shard 0 of 2 holds chunks 0 and 2 of each job.
  Shard shard(ShardOptions{});
  RegisterJobResponse resp;
  JobSpec asp_spec = Spec(ASP, 2);
  const RegisterJobRequest asp = Registration("asp", asp_spec, 2);
  const RegisterJobRequest bsp = Registration("bsp", Spec(BSP, 2), 2);
  ASSERT_TRUE(shard.RegisterJob(asp, &resp).ok());
  ASSERT_TRUE(shard.RegisterJob(bsp, &resp).ok());
  ASSERT_EQ(resp.chunks_held(), 2u);
  // Move both jobs off version 0 so "ahead" checks have room.
  PushResponse first_push;
  ASSERT_TRUE(
      shard.Push(PushRequestFor<PushRequest>(asp, 0, 0, {0, 2}, 0), &first_push)
          .ok());

  auto valid = [&](const RegisterJobRequest& reg) {
    return PushRequestFor<PushPullRequest>(reg, 1, 0, {0, 2}, 0);
  };
  struct Case {
    std::string name;
    PushPullRequest req;
    absl::StatusCode code;
    std::string want;    // substring of the message
    std::string reason;  // JobStats.rejected key ("" = shard-level)
  };
  std::vector<Case> cases;
  auto add = [&](std::string name, const RegisterJobRequest& reg,
                 std::function<void(PushPullRequest*)> mutate,
                 absl::StatusCode code, std::string want, std::string reason) {
    PushPullRequest req = valid(reg);
    mutate(&req);
    cases.push_back({std::move(name), std::move(req), code, std::move(want),
                     std::move(reason)});
  };
  using C = absl::StatusCode;
  add(
      "wrong_size", asp,
      [](auto* r) { r->mutable_gradients(1)->mutable_data()->resize(1000); },
      C::kInvalidArgument,
      "gradients[1].data: 1000 bytes, chunk 2 of tensor w holds 100 floats",
      "wrong_size");
  add(
      "unknown_job", asp, [](auto* r) { r->set_job_id("nope"); },
      C::kFailedPrecondition, "job_id: no job \"nope\" on shard 0", "");
  add(
      "unknown_chunk", asp,
      [](auto* r) { r->mutable_gradients(1)->set_chunk_id(9); },
      C::kInvalidArgument,
      "gradients[1].chunk_id: 9 out of range, job \"asp\" has 4 chunks",
      "unknown_chunk");
  add(
      "chunk_on_other_shard", asp,
      [](auto* r) { r->mutable_gradients(1)->set_chunk_id(3); },
      C::kInvalidArgument,
      "gradients[1].chunk_id: chunk 3 of tensor b is on shard 1, not shard 0",
      "chunk_not_on_shard");
  add(
      "duplicate_chunk", asp,
      [](auto* r) { r->mutable_gradients(1)->set_chunk_id(0); },
      C::kInvalidArgument,
      "gradients[1].chunk_id: chunk 0 also in gradients[0]", "duplicate_chunk");
  add(
      "worker_out_of_range", asp, [](auto* r) { r->set_worker(2); },
      C::kInvalidArgument, "worker: rank 2 out of range [0, 2)",
      "worker_out_of_range");
  add(
      "nan", asp,
      [](auto* r) {
        std::vector<float> g = Floats(r->gradients(1).data());
        g[17] = NAN;
        r->mutable_gradients(1)->set_data(Bytes(g));
      },
      C::kInvalidArgument, "gradients[1].data: element 17 is NaN",
      "non_finite");
  add(
      "inf", asp,
      [](auto* r) {
        std::vector<float> g = Floats(r->gradients(0).data());
        g[99] = -INFINITY;
        r->mutable_gradients(0)->set_data(Bytes(g));
      },
      C::kInvalidArgument, "gradients[0].data: element 99 is Inf",
      "non_finite");
  add(
      "version_ahead", asp,
      [](auto* r) { r->mutable_gradients(1)->set_version(7); },
      C::kInvalidArgument,
      "gradients[1].version: 7 is ahead of chunk 2 of tensor w at version 1",
      "version_ahead");
  add(
      "future_step", bsp, [](auto* r) { r->set_step(1); }, C::kInvalidArgument,
      "step: 1 is ahead of chunk 0 of tensor w at version 0", "future_step");

  const uint64_t asp_before = Checksum(shard, "asp");
  const uint64_t bsp_before = Checksum(shard, "bsp");
  for (const Case& c : cases) {
    const std::string job = c.req.job_id() == "bsp" ? "bsp" : "asp";
    const uint64_t count_before =
        c.reason.empty() ? 0 : Rejected(StatsOf(shard, job), c.reason);
    // Both entry points: the waiting PushPull and the unary Push.
    auto call = StartPushPull(shard, c.req);
    ASSERT_TRUE(call->done.HasBeenNotified()) << c.name;
    EXPECT_EQ(call->status.code(), c.code) << c.name << ": " << call->status;
    EXPECT_THAT(std::string(call->status.message()), HasSubstr(c.want))
        << c.name;
    PushRequest push;
    push.set_job_id(c.req.job_id());
    push.set_worker(c.req.worker());
    push.set_step(c.req.step());
    *push.mutable_gradients() = c.req.gradients();
    PushResponse push_resp;
    EXPECT_EQ(shard.Push(push, &push_resp).code(), c.code) << c.name;
    if (!c.reason.empty()) {
      EXPECT_EQ(Rejected(StatsOf(shard, job), c.reason), count_before + 2)
          << c.name;
    }
    EXPECT_EQ(Checksum(shard, "asp"), asp_before) << c.name;
    EXPECT_EQ(Checksum(shard, "bsp"), bsp_before) << c.name;
  }
  ShardStats stats;
  shard.Stats(StatsRequest(), &stats);
  EXPECT_EQ(stats.rejected().at("unknown_job"), 2u);
  EXPECT_EQ(shard.PendingWaits(), 0u);

  // The same valid request is accepted afterwards: the cases above failed
  // for their own reason only.
  auto ok = StartPushPull(shard, valid(asp));
  EXPECT_TRUE(ok->status.ok()) << ok->status;
  EXPECT_NE(Checksum(shard, "asp"), asp_before);

  // Pull's own inputs.
  EXPECT_EQ(StartPull(shard, "asp", 0, 0, {1})->status.code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StartPull(shard, "asp", 0, 0, {0, 0})->status.code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StartPull(shard, "asp", 0, 0, {8})->status.code(),
            absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------
// Concurrency.

// 8 threads push to 62 chunks in different orders. Every update subtracts
// the same lr * 1.0, so the result is exact whatever the interleaving.
TEST(ShardConcurrencyTest, EightThreadsAspManyChunks) {
  constexpr uint32_t kThreads = 8;
  constexpr int kSteps = 40;
  Shard shard(ShardOptions{});
  JobSpec spec = Spec(ASP, kThreads);
  spec.mutable_optimizer()->clear_momentum();
  spec.mutable_optimizer()->set_learning_rate(0.125f);
  spec.set_partition_bytes(4 * 5);  // 310 floats -> 62 chunks
  const RegisterJobRequest reg = Registration("j", spec);
  RegisterJobResponse resp;
  ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
  const int chunks = reg.placement().chunks_size();
  ASSERT_EQ(chunks, 62);
  std::vector<std::vector<float>> start = Params(shard, "j");

  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (uint32_t w = 0; w < kThreads; ++w) {
    threads.emplace_back([&, w] {
      for (int t = 0; t < kSteps; ++t) {
        PushPullRequest req;
        req.set_job_id("j");
        req.set_worker(w);
        req.set_step(t);
        for (int i = 0; i < chunks; ++i) {
          const uint32_t c = (i * 7 + w * 13 + t) % chunks;  // varied order
          ChunkData* g = req.add_gradients();
          g->set_chunk_id(c);
          g->set_data(Bytes(std::vector<float>(ChunkLength(reg, c), 1.0f)));
        }
        PushPullResponse r;
        absl::Notification n;
        absl::Status st;
        shard.PushPull(req, &r, [&](absl::Status s) {
          st = s;
          n.Notify();
        });
        n.WaitForNotification();
        if (!st.ok() || r.parameters_size() != chunks) ++failures;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);

  const std::vector<std::vector<float>> end = Params(shard, "j");
  for (int c = 0; c < chunks; ++c) {
    for (size_t i = 0; i < end[c].size(); ++i) {
      float want = start[c][i];
      for (uint32_t k = 0; k < kThreads * kSteps; ++k)
        want = want - 0.125f * 1.0f;
      ASSERT_EQ(end[c][i], want) << "chunk " << c << " element " << i;
    }
  }
  const JobStats s = StatsOf(shard, "j");
  EXPECT_EQ(s.version(), uint64_t{kThreads} * kSteps);
  EXPECT_EQ(s.pushes(), uint64_t{kThreads} * kSteps * chunks);
  EXPECT_EQ(s.duplicates(), 0u);
}

// 8 BSP workers on their own threads, each waiting for its reply before the
// next step: the result equals the single-threaded, in-order run bit for bit.
TEST(ShardConcurrencyTest, EightThreadsBspMatchesSequential) {
  constexpr uint32_t kWorkers = 8;
  constexpr int kSteps = 10;
  JobSpec spec = Spec(BSP, kWorkers);
  spec.set_partition_bytes(4 * 16);  // 20 chunks
  const RegisterJobRequest reg = Registration("j", spec);
  std::vector<uint32_t> all(reg.placement().chunks_size());
  std::iota(all.begin(), all.end(), 0);

  Shard sequential(ShardOptions{});
  RegisterJobResponse resp;
  ASSERT_TRUE(sequential.RegisterJob(reg, &resp).ok());
  for (int t = 0; t < kSteps; ++t) {
    std::vector<std::unique_ptr<PushPullCall>> calls;
    for (uint32_t w = 0; w < kWorkers; ++w) {
      calls.push_back(StartPushPull(
          sequential, PushRequestFor<PushPullRequest>(reg, w, t, all, t)));
    }
    ASSERT_TRUE(calls.back()->status.ok());
  }

  Shard threaded(ShardOptions{});
  ASSERT_TRUE(threaded.RegisterJob(reg, &resp).ok());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (uint32_t w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      for (int t = 0; t < kSteps; ++t) {
        std::vector<uint32_t> order = all;
        std::rotate(order.begin(), order.begin() + (w * 3 + t) % order.size(),
                    order.end());
        const PushPullRequest req =
            PushRequestFor<PushPullRequest>(reg, w, t, order, t);
        PushPullResponse r;
        absl::Notification n;
        absl::Status st;
        threaded.PushPull(req, &r, [&](absl::Status s) {
          st = s;
          n.Notify();
        });
        n.WaitForNotification();
        if (!st.ok()) ++failures;
        for (const ChunkData& d : r.parameters()) {
          if (d.version() != static_cast<uint64_t>(t + 1)) ++failures;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(Params(threaded, "j"), Params(sequential, "j"));
  EXPECT_EQ(threaded.PendingWaits(), 0u);
}

// ---------------------------------------------------------------------------
// Stats.

TEST(ShardStatsTest, FilledCompletely) {
  ShardOptions options;
  options.address = "localhost:7000";
  Shard shard(options);
  const RegisterJobRequest reg = Registration("j", Spec(BSP, 2));
  RegisterJobResponse resp;
  ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
  auto a = StartPushPull(shard, reg, 0, 0, 0);
  auto b = StartPushPull(shard, reg, 1, 0, 0);
  auto c = StartPushPull(shard, reg, 1, 1, 1);
  ASSERT_TRUE(b->status.ok());

  ShardStats stats;
  shard.Stats(StatsRequest(), &stats);
  EXPECT_EQ(stats.shard_id(), 0u);
  EXPECT_EQ(stats.address(), "localhost:7000");
  EXPECT_GE(stats.uptime_s(), 0);
  EXPECT_EQ(stats.jobs(), 1u);
  EXPECT_EQ(stats.chunks(), 4u);
  EXPECT_EQ(stats.bytes_held(), resp.bytes_held());
  EXPECT_EQ(stats.memory_budget_bytes(), 8ull << 30);
  ASSERT_EQ(stats.job_stats_size(), 1);
  const JobStats& s = stats.job_stats(0);
  EXPECT_EQ(s.job_id(), "j");
  EXPECT_EQ(s.mode(), BSP);
  EXPECT_EQ(s.version(), 1u);
  EXPECT_EQ(s.step(), 1u);
  EXPECT_EQ(s.chunks(), 4u);
  EXPECT_EQ(s.bytes_held(), resp.bytes_held());
  EXPECT_EQ(s.pushes(), 12u);
  EXPECT_EQ(s.pulls(), 8u);  // two answered PushPulls x 4 chunks
  EXPECT_EQ(s.bytes_in(), 3u * 310 * 4);
  EXPECT_EQ(s.bytes_out(), 2u * 310 * 4);
  EXPECT_EQ(s.applies(), 4u);
  EXPECT_GT(s.apply_latency_p50_us(), 0);
  EXPECT_GE(s.apply_latency_p99_us(), s.apply_latency_p50_us());
  EXPECT_THAT(s.missing_workers(), ElementsAre(0));
  ASSERT_EQ(s.workers_size(), 2);
  EXPECT_EQ(s.workers(1).worker(), 1u);
  EXPECT_EQ(s.workers(1).last_step(), 1u);
  EXPECT_EQ(s.workers(1).pushes(), 8u);
  EXPECT_EQ(s.workers(0).last_step(), 0u);
  EXPECT_TRUE(s.workers(0).active());
  EXPECT_EQ(s.staleness().bounds_size() + 1, s.staleness().counts_size());

  // Filtering by job, and an unknown job gives no job stats.
  StatsRequest other;
  other.set_job_id("other");
  shard.Stats(other, &stats);
  EXPECT_EQ(stats.job_stats_size(), 0);
  EXPECT_EQ(stats.jobs(), 1u);

  // `c` still waits; fail it before it goes out of scope.
  shard.Shutdown();
  EXPECT_EQ(c->status.code(), absl::StatusCode::kUnavailable);
}

// ---------------------------------------------------------------------------
// Checkpoints and restarts.

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
                       OptimizerKind kind = SGD) {
  JobSpec s = Spec(mode, 2);
  s.mutable_optimizer()->set_kind(kind);
  if (kind != SGD) s.mutable_optimizer()->set_momentum(0);
  s.mutable_consistency()->set_step_deadline_ms(20000);
  s.mutable_checkpoint()->set_every_steps(every_steps);
  return s;
}

// Both workers push `step` (in the given order); both answers arrive.
void BspStep(Shard& shard, const RegisterJobRequest& reg, uint64_t step,
             std::vector<uint32_t> order = {0, 1}) {
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

// A crash between steps with every_steps 1: the restored shard answers a
// stale retry with the parameters it has and continues bitwise like an
// uninterrupted run.
TEST(ShardCheckpointTest, BspRestoreContinuesBitwise) {
  for (OptimizerKind kind : {SGD, ADAM}) {
    SCOPED_TRACE(OptimizerKind_Name(kind));
    const RegisterJobRequest reg =
        Registration("j", CheckpointSpec(BSP, 1, kind));
    const std::string dir = CheckpointDir("bsp_restore");
    std::string image;
    uint64_t at_five;
    {
      Shard::RestoreReport report;
      std::unique_ptr<Shard> a = CheckpointingShard(dir, &report);
      EXPECT_TRUE(report.restored.empty());
      RegisterJobResponse resp;
      ASSERT_TRUE(a->RegisterJob(reg, &resp).ok());
      for (uint32_t t = 0; t < 5; ++t) BspStep(*a, reg, t, {t % 2, 1 - t % 2});
      at_five = Checksum(*a, "j");
      image = CrashImage(dir, "bsp_restore_image");
      // Pushed after the crash image: lost with the process.
      auto lost = StartPushPull(*a, reg, 0, 5, 5);
      a->Shutdown();
    }
    Shard::RestoreReport report;
    std::unique_ptr<Shard> b = CheckpointingShard(image, &report);
    ASSERT_EQ(report.restored.size(), 1u);
    EXPECT_THAT(report.restored[0], HasSubstr("job \"j\" at step 5 from "));
    EXPECT_TRUE(report.problems.empty());
    EXPECT_EQ(Checksum(*b, "j"), at_five);
    JobStats stats = StatsOf(*b, "j");
    EXPECT_EQ(stats.restored_from_step(), 5u);
    EXPECT_EQ(stats.version(), 5u);
    EXPECT_EQ(stats.checkpoints(), 0u);

    // Worker 1's retry of step 4 is stale: answered at once, version 5.
    auto stale = StartPushPull(*b, reg, 1, 4, 4);
    ASSERT_TRUE(stale->done.HasBeenNotified());
    ASSERT_TRUE(stale->status.ok()) << stale->status;
    EXPECT_EQ(stale->resp.stale(), 4u);
    EXPECT_EQ(stale->resp.parameters(0).version(), 5u);
    // Worker 0 retries step 5, worker 1 pushes it: applied once.
    for (uint64_t t = 5; t < 10; ++t) BspStep(*b, reg, t);
    EXPECT_EQ(Checksum(*b, "j"), ReferenceChecksum(reg, 10));
    EXPECT_EQ(StatsOf(*b, "j").checkpoints(), 5u);
  }
}

// With every_steps 1 an answer carrying version v leaves only once a
// checkpoint of version v is on disk: one checkpoint per step.
TEST(ShardCheckpointTest, AnswersWaitForTheirCheckpoint) {
  const RegisterJobRequest reg = Registration("j", CheckpointSpec(BSP, 1));
  const std::string dir = CheckpointDir("answers_wait");
  Shard::RestoreReport report;
  std::unique_ptr<Shard> shard = CheckpointingShard(dir, &report);
  RegisterJobResponse resp;
  ASSERT_TRUE(shard->RegisterJob(reg, &resp).ok());
  absl::StatusOr<std::unique_ptr<CheckpointStore>> store =
      CheckpointStore::Open(dir, 0);
  ASSERT_TRUE(store.ok());
  absl::StatusOr<CheckpointStore::Loaded> first = (*store)->LoadLatest("j");
  ASSERT_TRUE(first.ok()) << "registration did not write a checkpoint";
  EXPECT_EQ(first->checkpoint.step, 0u);
  for (uint64_t t = 0; t < 6; ++t) {
    BspStep(*shard, reg, t);
    absl::StatusOr<CheckpointStore::Loaded> latest = (*store)->LoadLatest("j");
    ASSERT_TRUE(latest.ok()) << latest.status();
    EXPECT_GE(latest->checkpoint.step, t + 1) << "answered before durable";
    for (const ChunkState& c : latest->checkpoint.chunks) {
      EXPECT_EQ(c.version, t + 1);
    }
  }
  EXPECT_EQ(StatsOf(*shard, "j").checkpoints(), 7u);  // registration + 6
  // A pull of a version not yet reached waits for the checkpoint too.
  auto pull = StartPull(*shard, "j", 6, 6);
  EXPECT_TRUE(pull->done.HasBeenNotified());
}

// A checkpoint taken in the middle of a step holds the pushes already
// buffered: the retry is a duplicate, the step completes once.
TEST(ShardCheckpointTest, PendingPushesSurviveARestore) {
  const RegisterJobRequest reg = Registration("j", CheckpointSpec(BSP, 1));
  const std::string dir = CheckpointDir("pending");
  std::string image;
  {
    Shard::RestoreReport report;
    std::unique_ptr<Shard> a = CheckpointingShard(dir, &report);
    RegisterJobResponse resp;
    ASSERT_TRUE(a->RegisterJob(reg, &resp).ok());
    for (uint64_t t = 0; t < 3; ++t) BspStep(*a, reg, t);
    auto waiting = StartPushPull(*a, reg, 0, 3, 3);
    ASSERT_TRUE(a->CheckpointNow("j").ok());
    image = CrashImage(dir, "pending_image");
    a->Shutdown();
    EXPECT_EQ(waiting->status.code(), absl::StatusCode::kUnavailable);
  }
  Shard::RestoreReport report;
  std::unique_ptr<Shard> b = CheckpointingShard(image, &report);
  ASSERT_EQ(report.restored.size(), 1u);
  EXPECT_THAT(StatsOf(*b, "j").missing_workers(), ElementsAre(1));
  auto retry = StartPushPull(*b, reg, 0, 3, 3);
  EXPECT_FALSE(retry->done.HasBeenNotified());
  auto other = StartPushPull(*b, reg, 1, 3, 3);
  for (auto* c : {retry.get(), other.get()}) {
    ASSERT_TRUE(c->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    ASSERT_TRUE(c->status.ok()) << c->status;
  }
  EXPECT_EQ(retry->resp.duplicates(), 4u);
  for (uint64_t t = 4; t < 6; ++t) BspStep(*b, reg, t);
  EXPECT_EQ(Checksum(*b, "j"), ReferenceChecksum(reg, 6));
}

// A graceful stop writes what changed since the last checkpoint, including
// a half-pushed step, so a restart loses nothing even without every_steps 1.
TEST(ShardCheckpointTest, ShutdownWritesALastCheckpoint) {
  const RegisterJobRequest reg = Registration("j", CheckpointSpec(BSP, 1000));
  const std::string dir = CheckpointDir("shutdown_last");
  {
    Shard::RestoreReport report;
    std::unique_ptr<Shard> a = CheckpointingShard(dir, &report);
    RegisterJobResponse resp;
    ASSERT_TRUE(a->RegisterJob(reg, &resp).ok());
    for (uint64_t t = 0; t < 3; ++t) BspStep(*a, reg, t);
    auto waiting = StartPushPull(*a, reg, 1, 3, 3);
    a->Shutdown();
    EXPECT_EQ(StatsOf(*a, "j").checkpoints(), 2u);  // registration, stop
  }
  Shard::RestoreReport report;
  std::unique_ptr<Shard> b = CheckpointingShard(dir, &report);
  ASSERT_EQ(report.restored.size(), 1u);
  EXPECT_EQ(StatsOf(*b, "j").restored_from_step(), 3u);
  BspStep(*b, reg, 3);
  EXPECT_EQ(Checksum(*b, "j"), ReferenceChecksum(reg, 4));
}

// Workers past the restored version: the shard lost their steps and says
// so instead of mixing versions.
TEST(ShardCheckpointTest, RestoredShardRefusesStepsItLost) {
  const RegisterJobRequest reg = Registration("j", CheckpointSpec(BSP, 1000));
  const std::string dir = CheckpointDir("lost_steps");
  std::string image;
  {
    Shard::RestoreReport report;
    std::unique_ptr<Shard> a = CheckpointingShard(dir, &report);
    RegisterJobResponse resp;
    ASSERT_TRUE(a->RegisterJob(reg, &resp).ok());
    for (uint64_t t = 0; t < 2; ++t) BspStep(*a, reg, t);
    ASSERT_TRUE(a->CheckpointNow("j").ok());
    for (uint64_t t = 2; t < 4; ++t) BspStep(*a, reg, t);
    image = CrashImage(dir, "lost_steps_image");
  }
  Shard::RestoreReport report;
  std::unique_ptr<Shard> b = CheckpointingShard(image, &report);
  ASSERT_EQ(report.restored.size(), 1u);
  const uint64_t before = Checksum(*b, "j");
  auto push = StartPushPull(*b, reg, 0, 4, 4);
  ASSERT_TRUE(push->done.HasBeenNotified());
  EXPECT_EQ(push->status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(push->status.message()),
              HasSubstr("shard 0 restarted and restored job \"j\" from its "
                        "checkpoint of step 2; the updates after it are lost"));
  EXPECT_THAT(std::string(push->status.message()), HasSubstr("every_steps: 1"));
  auto pull = StartPull(*b, "j", 4, 4);
  ASSERT_TRUE(pull->done.HasBeenNotified());
  EXPECT_EQ(pull->status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(pull->status.message()), HasSubstr("min_version: 4"));
  auto ok_pull = StartPull(*b, "j", 2, 2);
  EXPECT_TRUE(ok_pull->done.HasBeenNotified() && ok_pull->status.ok());
  EXPECT_EQ(Checksum(*b, "j"), before);
  EXPECT_EQ(Rejected(StatsOf(*b, "j"), "ahead_of_restore"), 2u);
}

// ASP: each worker's applied steps survive, so retries stay duplicates and
// the run continues as the same pushes would without the restart.
TEST(ShardCheckpointTest, AspRestoreKeepsDuplicateDetection) {
  const RegisterJobRequest reg = Registration("j", CheckpointSpec(ASP, 1000));
  auto push = [&](Shard& shard, uint32_t w, uint64_t step, uint64_t version) {
    PushResponse r;
    EXPECT_TRUE(shard
                    .Push(PushRequestFor<PushRequest>(reg, w, step, AllChunks(),
                                                      version),
                          &r)
                    .ok());
    return r;
  };
  Shard ref(ShardOptions{});
  RegisterJobResponse resp;
  ASSERT_TRUE(ref.RegisterJob(reg, &resp).ok());
  push(ref, 0, 0, 0);
  push(ref, 0, 1, 1);
  push(ref, 1, 0, 0);
  push(ref, 1, 1, 3);
  push(ref, 0, 2, 4);

  const std::string dir = CheckpointDir("asp_restore");
  std::string image;
  {
    Shard::RestoreReport report;
    std::unique_ptr<Shard> a = CheckpointingShard(dir, &report);
    ASSERT_TRUE(a->RegisterJob(reg, &resp).ok());
    push(*a, 0, 0, 0);
    push(*a, 0, 1, 1);
    push(*a, 1, 0, 0);
    ASSERT_TRUE(a->CheckpointNow("j").ok());
    push(*a, 1, 1, 3);  // lost with the crash
    image = CrashImage(dir, "asp_restore_image");
  }
  Shard::RestoreReport report;
  std::unique_ptr<Shard> b = CheckpointingShard(image, &report);
  ASSERT_EQ(report.restored.size(), 1u);
  const JobStats restored = StatsOf(*b, "j");
  EXPECT_EQ(restored.restored_from_step(), 1u);  // slowest worker: 1 step
  EXPECT_EQ(restored.step(), 1u);
  EXPECT_EQ(push(*b, 0, 1, 1).duplicates(), 4u);  // a retry, applied before
  EXPECT_EQ(push(*b, 1, 1, 4).duplicates(), 0u);  // version 4 was lost: ok
  push(*b, 0, 2, 4);
  EXPECT_EQ(Checksum(*b, "j"), Checksum(ref, "j"));
}

// Step and time triggers; nothing is written when nothing changed.
TEST(ShardCheckpointTest, StepAndTimeTriggers) {
  JobSpec spec = CheckpointSpec(ASP, 2);
  spec.mutable_checkpoint()->set_every_seconds(3600);
  const RegisterJobRequest reg = Registration("j", spec);
  const std::string dir = CheckpointDir("triggers");
  Shard::RestoreReport report;
  std::unique_ptr<Shard> shard = CheckpointingShard(dir, &report);
  RegisterJobResponse resp;
  ASSERT_TRUE(shard->RegisterJob(reg, &resp).ok());
  auto push = [&](uint32_t w, uint64_t step) {
    PushResponse r;
    ASSERT_TRUE(
        shard
            ->Push(PushRequestFor<PushRequest>(reg, w, step, AllChunks(), 0),
                   &r)
            .ok());
  };
  auto written = [&]() {
    shard->FlushCheckpoints();
    return StatsOf(*shard, "j").checkpoints();
  };
  EXPECT_EQ(written(), 1u);  // registration
  push(0, 0);
  push(0, 1);
  push(1, 0);
  EXPECT_EQ(written(), 1u);  // the slowest worker has 1 step of 2
  push(1, 1);
  EXPECT_EQ(written(), 2u);  // every_steps 2
  const absl::Time now = absl::Now();
  shard->CheckCheckpoints(now + absl::Minutes(30));
  EXPECT_EQ(written(), 2u);  // not due yet
  shard->CheckCheckpoints(now + absl::Hours(2));
  EXPECT_EQ(written(), 2u);  // due, but nothing changed
  push(0, 2);
  shard->CheckCheckpoints(now + absl::Hours(2));
  EXPECT_EQ(written(), 3u);
}

TEST(ShardCheckpointTest, NoCheckpointDirRunsWithAWarning) {
  Shard shard(ShardOptions{});
  const RegisterJobRequest reg = Registration("j", CheckpointSpec(BSP, 1));
  RegisterJobResponse resp;
  ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
  BspStep(shard, reg, 0);
  const JobStats s = StatsOf(shard, "j");
  EXPECT_EQ(Rejected(s, "no_checkpoint_dir"), 1u);
  EXPECT_EQ(s.checkpoints(), 0u);
  absl::Status st = shard.CheckpointNow("j");
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(st.message()), HasSubstr("no checkpoint_dir"));
  Shard::RestoreReport report;
  EXPECT_TRUE(shard.OpenCheckpoints(&report).ok());  // no dir: a no-op
}

// The newest file damaged: the previous one is used and the damaged one
// named; re-registration of a restored job is idempotent; dropping it
// deletes its checkpoints.
TEST(ShardCheckpointTest, CorruptNewestFallsBackThenDropDeletes) {
  const RegisterJobRequest reg = Registration("j", CheckpointSpec(BSP, 1000));
  const std::string dir = CheckpointDir("corrupt_newest");
  uint64_t initial;
  {
    Shard::RestoreReport report;
    std::unique_ptr<Shard> a = CheckpointingShard(dir, &report);
    RegisterJobResponse resp;
    ASSERT_TRUE(a->RegisterJob(reg, &resp).ok());
    initial = Checksum(*a, "j");
    BspStep(*a, reg, 0);
    ASSERT_TRUE(a->CheckpointNow("j").ok());
  }  // nothing changed since: no last checkpoint
  absl::StatusOr<std::unique_ptr<CheckpointStore>> store =
      CheckpointStore::Open(dir, 0);
  ASSERT_TRUE(store.ok());
  const std::string newest = (*store)->PathFor("j", 2);
  {
    std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << newest;
    f.seekp(100);
    f.put('\x5a');
  }
  Shard::RestoreReport report;
  std::unique_ptr<Shard> b = CheckpointingShard(dir, &report);
  ASSERT_EQ(report.restored.size(), 1u);
  EXPECT_THAT(report.restored[0], HasSubstr((*store)->PathFor("j", 1)));
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_THAT(report.problems[0], HasSubstr(newest));
  EXPECT_THAT(report.problems[0], HasSubstr("checksum mismatch"));
  EXPECT_THAT(report.problems[0], HasSubstr("using the previous checkpoint"));
  EXPECT_EQ(Checksum(*b, "j"), initial);

  RegisterJobResponse again;
  ASSERT_TRUE(b->RegisterJob(reg, &again).ok());
  EXPECT_EQ(again.chunks_held(), 4u);
  EXPECT_EQ(Checksum(*b, "j"), initial);

  DropJobRequest drop;
  drop.set_job_id("j");
  ASSERT_TRUE(b->DropJob(drop).ok());
  EXPECT_TRUE((*store)->ListJobs()->empty());
  Shard::RestoreReport after;
  std::unique_ptr<Shard> c = CheckpointingShard(dir, &after);
  EXPECT_TRUE(after.restored.empty());
  EXPECT_TRUE(after.problems.empty());
}

// Eight workers on many chunks, every step checkpointed and gated: the same
// bits as without checkpoints, one checkpoint per step, nothing stuck.
TEST(ShardCheckpointTest, EightThreadsGatedBspMatchesSequential) {
  constexpr uint32_t kWorkers = 8;
  constexpr int kSteps = 10;
  JobSpec spec = CheckpointSpec(BSP, 1);
  spec.set_num_workers(kWorkers);
  spec.set_partition_bytes(4 * 16);  // 20 chunks
  const RegisterJobRequest reg = Registration("j", spec);
  std::vector<uint32_t> all(reg.placement().chunks_size());
  std::iota(all.begin(), all.end(), 0);

  Shard sequential(ShardOptions{});
  RegisterJobResponse resp;
  ASSERT_TRUE(sequential.RegisterJob(reg, &resp).ok());
  for (int t = 0; t < kSteps; ++t) {
    std::vector<std::unique_ptr<PushPullCall>> calls;
    for (uint32_t w = 0; w < kWorkers; ++w) {
      calls.push_back(StartPushPull(
          sequential, PushRequestFor<PushPullRequest>(reg, w, t, all, t)));
    }
    ASSERT_TRUE(calls.back()->status.ok());
  }

  Shard::RestoreReport report;
  std::unique_ptr<Shard> threaded =
      CheckpointingShard(CheckpointDir("eight_gated"), &report);
  ASSERT_TRUE(threaded->RegisterJob(reg, &resp).ok());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (uint32_t w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      for (int t = 0; t < kSteps; ++t) {
        std::vector<uint32_t> order = all;
        std::rotate(order.begin(), order.begin() + (w * 3 + t) % order.size(),
                    order.end());
        // Two requests per step, as a client splitting its chunks would.
        const size_t half = order.size() / 2;
        std::vector<std::vector<uint32_t>> parts = {
            {order.begin(), order.begin() + half},
            {order.begin() + half, order.end()}};
        std::vector<std::unique_ptr<PushPullCall>> calls;
        for (const auto& part : parts) {
          calls.push_back(StartPushPull(
              *threaded, PushRequestFor<PushPullRequest>(reg, w, t, part, t)));
        }
        for (auto& c : calls) {
          if (!c->done.WaitForNotificationWithTimeout(absl::Seconds(30)) ||
              !c->status.ok()) {
            ++failures;
            continue;
          }
          for (const ChunkData& d : c->resp.parameters()) {
            if (d.version() != static_cast<uint64_t>(t + 1)) ++failures;
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(Params(*threaded, "j"), Params(sequential, "j"));
  EXPECT_EQ(StatsOf(*threaded, "j").checkpoints(), 1u + kSteps);
  EXPECT_EQ(threaded->PendingWaits(), 0u);
}

}  // namespace
}  // namespace ps
