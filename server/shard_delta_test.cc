// Shard tests. Delta pulls (server/internal/delta.h): a worker that names
// the version it holds gets only the entries changed since, and applied
// onto its copy that is bitwise the full reply; an optimizer that changes
// most entries, a version the shard did not send that worker, or a lag whose
// changes add up to more than the chunk are answered in full; bad `held`
// entries are refused, naming the field, before anything is applied.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/wire_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace shard_test {
namespace {

using ::testing::HasSubstr;

JobSpec TopkSpec(ConsistencyMode mode, WireFormat format, float momentum) {
  JobSpec s = Spec(mode, 2);
  s.mutable_optimizer()->set_momentum(momentum);
  s.mutable_wire()->set_format(format);
  s.mutable_wire()->set_topk_fraction(0.1f);
  return s;
}

// A top-k-like push: worker w's step-t gradient on every tenth entry (a
// different tenth per worker and step), in `format`, sparse.
ChunkData SparseGradient(const RegisterJobRequest& reg, uint32_t worker,
                         uint64_t step, uint32_t chunk, uint64_t version) {
  const uint64_t n = ChunkLength(reg, chunk);
  const std::vector<float> dense = Gradient(worker, step, chunk, n);
  std::vector<float> values;
  ChunkData g;
  g.set_chunk_id(chunk);
  g.set_version(version);
  for (uint32_t i = 0; i < n; ++i) {
    if ((i + step * 3 + worker * 5) % 10 != 0) continue;
    values.push_back(dense[i]);
    AppendOffset(i, g.mutable_indices());
  }
  g.set_format(
      EncodeValues(reg.spec().wire().format(), values, g.mutable_data()));
  return g;
}

// A worker's copy of every chunk and the version it holds of each.
struct Copy {
  std::vector<std::vector<float>> values;
  std::vector<uint64_t> versions;
};

// Applies reply chunk `d` to `copy`: a delta onto the entries it names,
// anything else in full.
void Apply(const ChunkData& d, Copy* copy) {
  std::vector<float>& v = copy->values[d.chunk_id()];
  if (!d.has_base_version()) {
    DecodePayload(d.format(), d.data(), "", absl::MakeSpan(v));
  } else {
    ASSERT_EQ(d.base_version(), copy->versions[d.chunk_id()]);
    for (size_t k = 0; k < d.indices().size() / 4; ++k) {
      v[OffsetAt(d.indices(), k)] = ValueAt(d.format(), d.data(), k);
    }
  }
  copy->versions[d.chunk_id()] = d.version();
}

// Every chunk in full, as the job's wire format carries it.
std::vector<std::vector<float>> FullReply(Shard& shard) {
  auto call = StartPull(shard, "j", 0, 0);
  EXPECT_TRUE(call->status.ok()) << call->status;
  std::vector<std::vector<float>> out;
  for (const ChunkData& d : call->resp.parameters()) {
    EXPECT_FALSE(d.has_base_version());
    std::vector<float> v(d.data().size() / ElementBytes(d.format()));
    DecodePayload(d.format(), d.data(), "", absl::MakeSpan(v));
    out.push_back(v);
  }
  return out;
}

Copy FirstPull(Shard& shard, uint32_t worker) {
  PullRequest req;
  req.set_job_id("j");
  req.set_worker(worker);
  for (uint32_t c : AllChunks()) req.add_chunk_ids(c);
  PullCall call;
  shard.Pull(req, &call.resp, call.Callback());
  EXPECT_TRUE(call.status.ok()) << call.status;
  Copy copy;
  copy.values.resize(kNumChunks);
  copy.versions.assign(kNumChunks, 0);
  for (const ChunkData& d : call.resp.parameters()) {
    copy.values[d.chunk_id()].resize(d.data().size() /
                                     ElementBytes(d.format()));
    Apply(d, &copy);
  }
  return copy;
}

PushPullRequest SparsePush(const RegisterJobRequest& reg, uint32_t worker,
                           uint64_t step, const Copy& copy) {
  PushPullRequest req;
  req.set_job_id("j");
  req.set_worker(worker);
  req.set_step(step);
  for (uint32_t c : AllChunks()) {
    *req.add_gradients() =
        SparseGradient(reg, worker, step, c, copy.versions[c]);
    HeldChunk* h = req.add_held();
    h->set_chunk_id(c);
    h->set_version(copy.versions[c]);
  }
  return req;
}

// What the PushPulls of BspSteps answered.
struct Answered {
  int last_step_deltas = 0;      // chunks of the last step sent as deltas
  uint64_t wire_bytes = 0;       // data + indices, every step
  uint64_t stats_bytes_out = 0;  // what JobStats.bytes_out counted for them
  uint64_t dense_bytes = 0;      // the same chunks in FP32
};

// BSP steps by both workers, each holding a copy updated from its replies;
// after each step both copies equal the full reply bitwise.
Answered BspSteps(Shard& shard, const RegisterJobRequest& reg, int steps) {
  Copy copies[2] = {FirstPull(shard, 0), FirstPull(shard, 1)};
  Answered out;
  for (int t = 0; t < steps; ++t) {
    SCOPED_TRACE(t);
    const uint64_t bytes_before = StatsOf(shard, "j").bytes_out();
    auto a = StartPushPull(shard, SparsePush(reg, 0, t, copies[0]));
    auto b = StartPushPull(shard, SparsePush(reg, 1, t, copies[1]));
    for (auto* call : {a.get(), b.get()}) {
      EXPECT_TRUE(call->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
      EXPECT_TRUE(call->status.ok()) << call->status;
    }
    out.stats_bytes_out += StatsOf(shard, "j").bytes_out() - bytes_before;
    out.last_step_deltas = 0;
    for (int w = 0; w < 2; ++w) {
      const PushPullCall& call = w == 0 ? *a : *b;
      for (const ChunkData& d : call.resp.parameters()) {
        Apply(d, &copies[w]);
        out.last_step_deltas += d.has_base_version();
        out.wire_bytes += d.data().size() + d.indices().size();
        out.dense_bytes += ChunkLength(reg, d.chunk_id()) * sizeof(float);
      }
      EXPECT_EQ(copies[w].values, FullReply(shard)) << "worker " << w;
    }
  }
  return out;
}

TEST(ShardDeltaTest, PlainSgdAnswersDeltasThatMatchFullRepliesBitwise) {
  for (WireFormat format : {FP32, BF16, FP16}) {
    SCOPED_TRACE(WireFormatName(format));
    const RegisterJobRequest reg =
        Registration("j", TopkSpec(BSP, format, /*momentum=*/0));
    Shard shard(Options(0));
    RegisterJobResponse resp;
    ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
    const Answered got = BspSteps(shard, reg, 5);
    EXPECT_EQ(got.last_step_deltas, 2 * kNumChunks);
    const JobStats s = StatsOf(shard, "j");
    EXPECT_EQ(s.delta_pulls(), 5u * 2 * kNumChunks);
    EXPECT_EQ(s.delta_refused(), 0u);
    // The stats count what went out; two workers' tenths change a fifth of
    // the entries: offsets and values of a fifth, under 0.6 of the full
    // chunk in 16 bits, 0.4 in 32.
    EXPECT_EQ(got.stats_bytes_out, got.wire_bytes);
    const uint64_t full =
        got.dense_bytes / sizeof(float) * ElementBytes(format);
    EXPECT_LE(got.wire_bytes * 10, full * (format == FP32 ? 4 : 6));
  }
}

TEST(ShardDeltaTest, MomentumChangesEveryEntrySoRepliesGoFull) {
  const RegisterJobRequest reg =
      Registration("j", TopkSpec(BSP, FP32, /*momentum=*/0.9f));
  Shard shard(Options(0));
  RegisterJobResponse resp;
  ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
  // Momentum keeps moving every entry that ever had a gradient: after
  // five steps that is all of them, and the copies (exact throughout,
  // BspSteps checks) are refreshed in full.
  EXPECT_EQ(BspSteps(shard, reg, 8).last_step_deltas, 0);
  const JobStats s = StatsOf(shard, "j");
  EXPECT_GT(s.delta_pulls(), 0u);  // the first steps: few entries moved
  EXPECT_GE(s.delta_refused(), 3u * 2 * kNumChunks);
}

TEST(ShardDeltaTest, JobsWithoutTopkTrackNothingAndHoldLess) {
  JobSpec plain = TopkSpec(BSP, FP32, 0);
  plain.mutable_wire()->clear_topk_fraction();
  Shard shard(Options(0));
  RegisterJobResponse with, without;
  ASSERT_TRUE(
      shard.RegisterJob(Registration("j", TopkSpec(BSP, FP32, 0)), &with).ok());
  ASSERT_TRUE(shard.RegisterJob(Registration("p", plain), &without).ok());
  // The log (4 bytes per entry) and a cached delta (under 4 per entry).
  EXPECT_GE(with.bytes_held(), without.bytes_held() + 8 * 310);
}

// ASP: worker 1 keeps pushing while worker 0 holds an old version.
class AspLagTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(shard_.RegisterJob(reg_, &resp_).ok());
    lagging_ = FirstPull(shard_, 0);
    busy_ = FirstPull(shard_, 1);
  }
  void BusySteps(int n) {
    for (int i = 0; i < n; ++i, ++busy_step_) {
      auto call = StartPushPull(shard_, SparsePush(reg_, 1, busy_step_, busy_));
      ASSERT_TRUE(call->status.ok()) << call->status;
      for (const ChunkData& d : call->resp.parameters()) Apply(d, &busy_);
    }
  }
  // Worker 0 pulls every chunk naming `held` as its versions.
  PullResponse PullHolding(uint32_t worker, const std::vector<uint64_t>& held) {
    PullRequest req;
    req.set_job_id("j");
    req.set_worker(worker);
    for (uint32_t c : AllChunks()) {
      req.add_chunk_ids(c);
      HeldChunk* h = req.add_held();
      h->set_chunk_id(c);
      h->set_version(held[c]);
    }
    PullCall call;
    shard_.Pull(req, &call.resp, call.Callback());
    EXPECT_TRUE(call.status.ok()) << call.status;
    return call.resp;
  }

  const RegisterJobRequest reg_ =
      Registration("j", TopkSpec(ASP, FP32, /*momentum=*/0));
  Shard shard_{Options(0)};
  RegisterJobResponse resp_;
  Copy lagging_, busy_;
  uint64_t busy_step_ = 0;
};

TEST_F(AspLagTest, ShortLagGetsTheUnionOfTheChanges) {
  BusySteps(3);  // three different tenths
  const PullResponse resp = PullHolding(0, lagging_.versions);
  for (const ChunkData& d : resp.parameters()) {
    EXPECT_TRUE(d.has_base_version());
    EXPECT_EQ(d.base_version(), 0u);
    EXPECT_EQ(d.version(), 3u);
    // At most the three tenths pushed (a step too small for an entry's
    // float leaves it unchanged).
    const size_t tenths = ChunkLength(reg_, d.chunk_id()) / 10 * 3;
    EXPECT_LE(d.indices().size() / 4, tenths) << "chunk " << d.chunk_id();
    EXPECT_GE(d.indices().size() / 4, tenths / 2) << "chunk " << d.chunk_id();
    Apply(d, &lagging_);
  }
  EXPECT_EQ(lagging_.values, FullReply(shard_));
}

TEST_F(AspLagTest, LongLagWhoseChangesOutgrowTheChunkGetsItInFull) {
  BusySteps(8);  // eight tenths: offsets + values exceed the chunk
  const PullResponse resp = PullHolding(0, lagging_.versions);
  for (const ChunkData& d : resp.parameters()) {
    EXPECT_FALSE(d.has_base_version());
    Apply(d, &lagging_);
  }
  EXPECT_EQ(lagging_.values, FullReply(shard_));
  EXPECT_EQ(StatsOf(shard_, "j").delta_refused(), uint64_t{kNumChunks});
}

TEST_F(AspLagTest, AVersionNotSentToThisWorkerGetsTheChunkInFull) {
  BusySteps(2);
  // Worker 0 claims the version worker 1 holds: the shard never sent it
  // to worker 0, so it cannot know worker 0's copy.
  const PullResponse resp = PullHolding(0, busy_.versions);
  for (const ChunkData& d : resp.parameters()) {
    EXPECT_FALSE(d.has_base_version());
  }
  // A version never reached (a worker of a restarted shard's past).
  std::vector<uint64_t> ahead(kNumChunks, 99);
  const PullResponse ahead_resp = PullHolding(1, ahead);
  for (const ChunkData& d : ahead_resp.parameters()) {
    EXPECT_FALSE(d.has_base_version());
  }
  // Now worker 0 holds the current version: nothing changed since.
  std::vector<uint64_t> now(kNumChunks, 2);
  const PullResponse now_resp = PullHolding(0, now);
  for (const ChunkData& d : now_resp.parameters()) {
    EXPECT_TRUE(d.has_base_version());
    EXPECT_TRUE(d.indices().empty());
    EXPECT_TRUE(d.data().empty());
  }
}

TEST(ShardDeltaTest, BadHeldEntriesAreRefusedNamingTheFieldAndApplyNothing) {
  const RegisterJobRequest reg =
      Registration("j", TopkSpec(ASP, FP32, /*momentum=*/0));
  JobSpec plain = reg.spec();
  plain.mutable_wire()->clear_topk_fraction();
  Shard shard(Options(0));
  RegisterJobResponse resp;
  ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
  ASSERT_TRUE(shard.RegisterJob(Registration("p", plain), &resp).ok());
  const Copy copy = FirstPull(shard, 0);
  const uint64_t before = Checksum(shard, "j");
  struct Case {
    std::string name, job, error;
    std::function<void(PushPullRequest*)> mutate;
  };
  const std::vector<Case> cases = {
      {"no top-k", "p", "held: job \"p\" has no delta pulls",
       [](PushPullRequest*) {}},
      {"not pushed", "j", "held[4].chunk_id: chunk 9 is not in gradients",
       [](PushPullRequest* r) { r->add_held()->set_chunk_id(9); }},
      {"twice", "j", "held[4].chunk_id: chunk 2 listed twice",
       [](PushPullRequest* r) { *r->add_held() = r->held(2); }},
      {"reserved version", "j", "held[1].chunk_id: version",
       [](PushPullRequest* r) { r->mutable_held(1)->set_version(UINT64_MAX); }},
      {"pushed delta", "j", "gradients[3].base_version: set on a pushed",
       [](PushPullRequest* r) {
         r->mutable_gradients(3)->set_base_version(0);
       }},
  };
  std::map<std::string, uint64_t> rejected;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    PushPullRequest req = SparsePush(reg, 0, 0, copy);
    req.set_job_id(c.job);
    c.mutate(&req);
    auto call = StartPushPull(shard, req);
    ASSERT_TRUE(call->done.HasBeenNotified());
    EXPECT_EQ(call->status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(call->status.message()), HasSubstr(c.error));
    EXPECT_EQ(Rejected(StatsOf(shard, c.job), "bad_delta"), ++rejected[c.job]);
    // ASP would have applied the push at once.
    EXPECT_EQ(Checksum(shard, "j"), before);
  }
  // A pull naming held chunks without chunk_ids.
  PullRequest pull;
  pull.set_job_id("j");
  pull.add_held()->set_chunk_id(0);
  PullCall call;
  shard.Pull(pull, &call.resp, call.Callback());
  EXPECT_THAT(std::string(call.status.message()),
              HasSubstr("held: given without chunk_ids"));
}

}  // namespace
}  // namespace shard_test
}  // namespace ps
