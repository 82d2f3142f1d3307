// Two psd processes, three workers (PsClient threads in this process), 50
// BSP steps over loopback; then `psctl stats --json`, and a table of bad
// requests that must each be refused while every parameter bit stays put.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/security.h"
#include "common/text_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "server/coordinator/job_validation.h"
#include "server/coordinator/placement.h"
#include "tests/checksum.h"
#include "tests/subprocess.h"
#include "worker/client/ps_client.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

constexpr int kShards = 2;
constexpr int kWorkers = 3;
constexpr int kSteps = 50;

// A deterministic, realistic gradient: pulls the parameters toward a
// worker-specific target, with a little seeded noise.
void FakeGradient(const std::vector<float>& params, uint32_t rank,
                  uint64_t step, std::vector<float>* grad) {
  uint64_t state =
      (rank + 1) * 0x9E3779B97F4A7C15ull ^ (step + 1) * 0xBF58476D1CE4E5B9ull;
  for (size_t i = 0; i < params.size(); ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    float noise = static_cast<float>((state >> 40) & 0xFFFF) / 65536.0f - 0.5f;
    float target = 0.1f * static_cast<float>(rank + 1) * std::sin(0.001f * i);
    (*grad)[i] = (params[i] - target) + 0.01f * noise;
  }
}

class PsIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestDir(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(WriteFileAtomically(dir_ + "/cluster.pbtxt",
                                    "shards { address_file: \"s0.addr\" }\n"
                                    "shards { address_file: \"s1.addr\" }\n")
                    .ok());
    for (int i = 0; i < kShards; ++i) {
      std::string cfg = absl::StrCat(dir_, "/psd", i, ".pbtxt");
      ASSERT_TRUE(WriteFileAtomically(
                      cfg, absl::StrCat("cluster_file: \"cluster.pbtxt\"\n",
                                        "shard_id: ", i, "\n",
                                        "address_file: \"s", i, ".addr\"\n"))
                      .ok());
      psd_[i] = std::make_unique<Subprocess>();
      ASSERT_TRUE(psd_[i]
                      ->Start({"server/psd", "--config=" + cfg},
                              absl::StrCat(dir_, "/psd", i, ".log"))
                      .ok());
    }
    for (int i = 0; i < kShards; ++i) {
      absl::StatusOr<std::string> a =
          WaitForFile(absl::StrCat(dir_, "/s", i, ".addr"), absl::Seconds(30));
      ASSERT_TRUE(a.ok()) << a.status();
      addresses_.push_back(*a);
      stubs_.push_back(ParameterServer::NewStub(security_.NewChannel(*a)));
    }
    // The job: a small MLP, BSP over 3 workers, Adam on the shards, chunks
    // of 16 KiB so every tensor spans several chunks and both shards.
    JobSpec spec;
    ASSERT_TRUE(
        ParseTextProto(
            R"pb(
              name: "integration"
              model { mlp { input_dim: 784 hidden: 32 num_classes: 10 } }
              data {
                dataset: "synthetic"
                batch_size: 8
                epochs: 1
                synthetic_train: 100
                synthetic_test: 10
              }
              optimizer { kind: ADAM learning_rate: 0.01 }
              consistency { mode: BSP step_deadline_ms: 30000 }
              num_workers: 3
              partition_bytes: 16384
              seed: 11
            )pb",
            "spec", &spec)
            .ok());
    ValidationContext ctx;
    ctx.num_shards = kShards;
    absl::StatusOr<JobSpec> normalized = NormalizeJobSpec(spec, ctx);
    ASSERT_TRUE(normalized.ok()) << normalized.status();
    absl::StatusOr<Placement> placement = PlaceChunks(*normalized, kShards);
    ASSERT_TRUE(placement.ok()) << placement.status();
    assignment_.set_job_id("job-it");
    *assignment_.mutable_spec() = *normalized;
    *assignment_.mutable_placement() = *placement;
    assignment_.set_num_workers(kWorkers);
    for (const std::string& a : addresses_) assignment_.add_shard_addresses(a);
    for (int s = 0; s < kShards; ++s) {
      RegisterJobRequest req;
      req.set_job_id("job-it");
      *req.mutable_spec() = *normalized;
      *req.mutable_placement() = *placement;
      req.set_num_workers(kWorkers);
      RegisterJobResponse resp;
      grpc::ClientContext ctx_s;
      ctx_s.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
      grpc::Status st = stubs_[s]->RegisterJob(&ctx_s, req, &resp);
      ASSERT_TRUE(st.ok()) << st.error_message();
      EXPECT_GT(resp.chunks_held(), 0u) << "shard " << s;
    }
  }

  void TearDown() override {
    stubs_.clear();
    for (auto& p : psd_) {
      if (p && p->running()) {
        absl::StatusOr<int> code = p->Stop(absl::Seconds(10));
        EXPECT_TRUE(code.ok() && *code == 0) << "psd did not shut down cleanly";
      }
    }
  }

  std::unique_ptr<PsClient> NewClient(uint32_t rank) {
    Assignment a = assignment_;
    a.set_rank(rank);
    absl::StatusOr<std::unique_ptr<PsClient>> c =
        PsClient::Create(PsClientOptions(), a, &security_);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  // Every parameter, read at version >= min_version.
  std::vector<float> ReadAll(uint64_t min_version) {
    std::unique_ptr<PsClient> c = NewClient(0);
    std::vector<float> p(c->num_parameters());
    absl::Status s = c->Pull(min_version, absl::MakeSpan(p));
    EXPECT_TRUE(s.ok()) << s;
    return p;
  }

  grpc::Status Push(uint32_t shard, const PushPullRequest& req,
                    PushPullResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    return stubs_[shard]->PushPull(&ctx, req, resp);
  }

  std::string dir_;
  Security security_;
  std::unique_ptr<Subprocess> psd_[kShards];
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<ParameterServer::Stub>> stubs_;
  Assignment assignment_;
};

TEST_F(PsIntegrationTest, ThreeWorkersFiftyBspStepsAgreeBitwise) {
  std::vector<std::vector<float>> final_params(kWorkers);
  std::vector<absl::Status> status(kWorkers);
  std::vector<std::thread> threads;
  for (uint32_t rank = 0; rank < kWorkers; ++rank) {
    threads.emplace_back([&, rank] {
      std::unique_ptr<PsClient> client = NewClient(rank);
      if (client == nullptr) return;
      std::vector<float> params(client->num_parameters()), grad(params.size());
      status[rank] = client->Pull(0, absl::MakeSpan(params));
      for (uint64_t step = 0; status[rank].ok() && step < kSteps; ++step) {
        FakeGradient(params, rank, step, &grad);
        status[rank] = client->PushPull(step, grad, absl::MakeSpan(params));
      }
      final_params[rank] = params;
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < kWorkers; ++r)
    ASSERT_TRUE(status[r].ok()) << r << ": " << status[r];
  ASSERT_FALSE(final_params[0].empty());
  for (uint32_t r = 1; r < kWorkers; ++r) {
    EXPECT_EQ(ParamChecksum(final_params[r]), ParamChecksum(final_params[0]))
        << "worker " << r;
  }
  EXPECT_EQ(ParamChecksum(ReadAll(kSteps)), ParamChecksum(final_params[0]));

  // psctl stats --json shows the traffic on both shards.
  absl::StatusOr<CommandResult> stats =
      RunCommand({"tools/psctl/psctl", "--cluster=" + dir_ + "/cluster.pbtxt",
                  "stats", "--json"},
                 absl::Seconds(20));
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->exit_code, 0) << stats->err;
  EXPECT_THAT(stats->out, HasSubstr("\"job_id\": \"job-it\""));
  EXPECT_THAT(stats->out, HasSubstr("\"version\": \"50\""));
  EXPECT_THAT(stats->out, HasSubstr("\"pushes\""));
  EXPECT_THAT(stats->out, HasSubstr("\"bytes_in\""));
  EXPECT_THAT(stats->out, HasSubstr("\"apply_latency_p99_us\""));
}

TEST_F(PsIntegrationTest, BadRequestsAreRefusedAndChangeNothing) {
  const std::vector<float> before = ReadAll(0);
  const uint64_t sum_before = ParamChecksum(before);
  const Placement& placement = assignment_.placement();
  // A chunk on shard 0 and one on shard 1.
  const ChunkPlacement* on0 = nullptr;
  const ChunkPlacement* on1 = nullptr;
  for (const ChunkPlacement& c : placement.chunks()) {
    if (c.shard() == 0 && on0 == nullptr) on0 = &c;
    if (c.shard() == 1 && on1 == nullptr) on1 = &c;
  }
  ASSERT_NE(on0, nullptr);
  ASSERT_NE(on1, nullptr);
  auto good = [&]() {
    PushPullRequest r;
    r.set_job_id("job-it");
    r.set_worker(0);
    r.set_step(0);
    r.set_attempt(1);
    ChunkData* d = r.add_gradients();
    d->set_chunk_id(on0->chunk_id());
    d->set_data(std::string(on0->length() * sizeof(float), '\0'));
    return r;
  };
  auto set_float = [](PushPullRequest* r, size_t i, float v) {
    std::string* data = r->mutable_gradients(0)->mutable_data();
    std::memcpy(data->data() + i * sizeof(float), &v, sizeof(float));
  };
  struct Case {
    std::string name;
    std::function<void(PushPullRequest*)> corrupt;
    grpc::StatusCode code;
    std::string mentions;
  };
  std::vector<Case> cases = {
      {"short gradient",
       [](PushPullRequest* r) {
         r->mutable_gradients(0)->mutable_data()->resize(12);
       },
       grpc::INVALID_ARGUMENT, "gradients[0].data"},
      {"ragged bytes",
       [](PushPullRequest* r) {
         r->mutable_gradients(0)->mutable_data()->push_back('x');
       },
       grpc::INVALID_ARGUMENT, "gradients[0].data"},
      {"unknown job", [](PushPullRequest* r) { r->set_job_id("nope"); },
       grpc::FAILED_PRECONDITION, "job_id: no job \"nope\""},
      {"empty job", [](PushPullRequest* r) { r->set_job_id(""); },
       grpc::FAILED_PRECONDITION, "job_id"},
      {"unknown chunk",
       [](PushPullRequest* r) { r->mutable_gradients(0)->set_chunk_id(99999); },
       grpc::INVALID_ARGUMENT, "chunk_id"},
      {"chunk of another shard",
       [&](PushPullRequest* r) {
         r->mutable_gradients(0)->set_chunk_id(on1->chunk_id());
         r->mutable_gradients(0)->mutable_data()->resize(on1->length() *
                                                         sizeof(float));
       },
       grpc::INVALID_ARGUMENT, "chunk_id"},
      {"NaN", [&](PushPullRequest* r) { set_float(r, 3, std::nanf("")); },
       grpc::INVALID_ARGUMENT, "NaN"},
      {"Inf", [&](PushPullRequest* r) { set_float(r, 0, INFINITY); },
       grpc::INVALID_ARGUMENT, "Inf"},
      {"step from the future", [](PushPullRequest* r) { r->set_step(7); },
       grpc::INVALID_ARGUMENT, "step"},
      {"worker out of range", [](PushPullRequest* r) { r->set_worker(3); },
       grpc::INVALID_ARGUMENT, "worker"},
      {"duplicate chunk in one request",
       [&](PushPullRequest* r) { *r->add_gradients() = r->gradients(0); },
       grpc::INVALID_ARGUMENT, "chunk"},
      {"NaN in a later chunk of the same request",
       [&](PushPullRequest* r) {
         // The first chunk is valid; nothing of it may be applied either.
         const ChunkPlacement* second = nullptr;
         for (const ChunkPlacement& c : placement.chunks()) {
           if (c.shard() == 0 && c.chunk_id() != on0->chunk_id()) second = &c;
         }
         ChunkData* d = r->add_gradients();
         d->set_chunk_id(second->chunk_id());
         std::vector<float> bad(second->length(), 1.0f);
         bad.back() = std::nanf("");
         d->set_data(reinterpret_cast<const char*>(bad.data()),
                     bad.size() * sizeof(float));
       },
       grpc::INVALID_ARGUMENT, "NaN"},
      {"oversize message (> 4 MiB)",
       [](PushPullRequest* r) {
         r->mutable_gradients(0)->mutable_data()->resize(5 << 20);
       },
       grpc::RESOURCE_EXHAUSTED, ""},
  };
  for (const Case& c : cases) {
    PushPullRequest req = good();
    c.corrupt(&req);
    PushPullResponse resp;
    absl::Time start = absl::Now();
    grpc::Status s = Push(0, req, &resp);
    EXPECT_LT(absl::Now() - start, absl::Seconds(2))
        << c.name << ": refusals are immediate";
    EXPECT_EQ(s.error_code(), c.code) << c.name << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(c.mentions)) << c.name;
  }
  // Re-registration with another shape is refused too.
  {
    JobSpec other = assignment_.spec();
    other.clear_tensors();
    other.mutable_model()->mutable_mlp()->set_hidden(0, 33);
    ValidationContext vctx;
    vctx.num_shards = kShards;
    absl::StatusOr<JobSpec> normalized = NormalizeJobSpec(other, vctx);
    ASSERT_TRUE(normalized.ok()) << normalized.status();
    absl::StatusOr<Placement> other_placement =
        PlaceChunks(*normalized, kShards);
    ASSERT_TRUE(other_placement.ok()) << other_placement.status();
    RegisterJobRequest req;
    req.set_job_id("job-it");
    *req.mutable_spec() = *normalized;
    *req.mutable_placement() = *other_placement;
    req.set_num_workers(kWorkers);
    RegisterJobResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    grpc::Status s = stubs_[0]->RegisterJob(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::FAILED_PRECONDITION) << s.error_message();
  }
  EXPECT_EQ(ParamChecksum(ReadAll(0)), sum_before)
      << "a refused request changed parameters";

  // Both daemons are still up, and the refusals are counted by reason.
  for (auto& p : psd_) ASSERT_TRUE(p->running());
  StatsRequest sreq;
  ShardStats stats;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  ASSERT_TRUE(stubs_[0]->Stats(&ctx, sreq, &stats).ok());
  uint64_t rejected = 0;
  for (const auto& [reason, n] : stats.rejected()) rejected += n;
  for (const JobStats& j : stats.job_stats()) {
    for (const auto& [reason, n] : j.rejected()) rejected += n;
  }
  // Every case but the oversize one (refused by gRPC before the shard).
  EXPECT_GE(rejected, cases.size() - 1);
}

}  // namespace
}  // namespace ps
