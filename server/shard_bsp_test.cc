// Shard tests. BSP: reproducible rank-order sums, the mean gradient, duplicates
// and stale pushes, backup workers, membership, shared reply payloads.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/optimizer.h"
#include "server/shard.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace shard_test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

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

// `req`'s gradients as the RPC layer hands them over: each payload copied
// to an odd address and cut in three pieces (floats split between them),
// held by `storage` as gRPC's receive slices are held by their keep.
struct Received {
  std::shared_ptr<std::vector<std::string>> storage;
  GradientsIn gradients;
};
Received InPieces(const PushPullRequest& req) {
  Received r;
  r.storage = std::make_shared<std::vector<std::string>>();
  r.storage->reserve(3 * static_cast<size_t>(req.gradients_size()));
  r.gradients = GradientsFrom(req.gradients());
  for (GradientIn& g : r.gradients) {
    const std::string data = g.data.Flatten();
    g.data.pieces.clear();
    const size_t cuts[] = {0, data.size() / 3 + 1, 2 * data.size() / 3 + 2,
                           data.size()};
    for (int k = 0; k < 3; ++k) {
      r.storage->push_back("x" + data.substr(cuts[k], cuts[k + 1] - cuts[k]));
      g.data.pieces.push_back(absl::string_view(r.storage->back()).substr(1));
    }
    g.data.keep = r.storage;
  }
  return r;
}

// The RPC layer's path: pushes leave their payloads in the received pieces
// (the shard keeps them until the step is applied, then lets go) and replies
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
    Received in1 = InPieces(r1), in0 = InPieces(r0);
    shard.PushPull(r1, in1.gradients, &b.resp, b.Callback(), &pb);
    in1.gradients.clear();
    EXPECT_FALSE(b.done.HasBeenNotified());
    EXPECT_GT(in1.storage.use_count(), 1) << "worker 1's pieces not kept";
    shard.PushPull(r0, in0.gradients, &a.resp, a.Callback(), &pa);
    in0.gradients.clear();
    ASSERT_TRUE(a.done.HasBeenNotified() && b.done.HasBeenNotified());
    EXPECT_EQ(in1.storage.use_count(), 1) << "kept past the step";
    EXPECT_EQ(in0.storage.use_count(), 1) << "kept past the step";
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

// `got` holds every chunk of `before` after one optimizer step over the sum
// of workers 0, 1 and 2's step-0 gradients times `scale`.
void ExpectStepOfThreeWorkers(const RegisterJobRequest& reg,
                              const std::vector<std::vector<float>>& before,
                              float scale, const PushPullResponse& got) {
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
    (*opt)->Apply(absl::MakeSpan(want), sum.data(), scale, &state);
    EXPECT_EQ(Floats(got.parameters(chunk).data()), want) << chunk;
    EXPECT_EQ(got.parameters(chunk).chunk_id(), chunk);
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

  ExpectStepOfThreeWorkers(reg, before, 1.0f / 3, a->resp);
}

// Elastic job (JobSpec.max_workers 4, lr_rule LINEAR, submitted with 2):
// the shard holds 4 rank slots; with 3 of them active a step's update is
// the pushes' sum over 2, i.e. lr x 3/2 times their mean.
TEST(ShardBspTest, LinearLrRuleScalesWithTheWorkersCounted) {
  Shard shard(ShardOptions{});
  JobSpec spec = Spec(BSP, 2);
  spec.set_max_workers(4);
  spec.set_lr_rule(LR_RULE_LINEAR);
  RegisterJobRequest reg = Registration("j", spec);
  reg.set_num_workers(5);  // neither num_workers nor max_workers
  RegisterJobResponse resp;
  EXPECT_EQ(shard.RegisterJob(reg, &resp).code(),
            absl::StatusCode::kInvalidArgument);
  reg.set_num_workers(4);
  ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
  SetMembershipRequest m;
  m.set_job_id("j");
  for (uint32_t w : {0, 1, 2}) m.add_active_workers(w);
  ASSERT_TRUE(shard.SetMembership(m).ok());
  const std::vector<std::vector<float>> before = Params(shard, "j");
  auto a = StartPushPull(shard, reg, 2, 0, 0);
  auto b = StartPushPull(shard, reg, 0, 0, 0);
  auto c = StartPushPull(shard, reg, 1, 0, 0);
  ASSERT_TRUE(c->done.HasBeenNotified() && c->status.ok());

  ExpectStepOfThreeWorkers(reg, before, 1.0f / 2, a->resp);
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

}  // namespace
}  // namespace shard_test
}  // namespace ps
