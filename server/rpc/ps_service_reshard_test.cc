// PsService's Reshard and FetchChunks over gRPC: two shards (Shard +
// PsService, port 0) whose PREPAREs fetch from each other through
// GrpcChunkFetcher; the moved chunks are served by their new owner with the
// values the old one held, and the old placement epoch is refused ABORTED.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/security.h"
#include "core/chunking.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/rpc/chunk_fetcher.h"
#include "server/rpc/ps_service.h"
#include "server/shard.h"

namespace ps {
namespace {

JobSpec TwoTensorSpec() {
  JobSpec s;
  s.set_name("t");
  s.set_num_workers(1);
  s.set_seed(7);
  s.set_partition_bytes(400);
  s.mutable_optimizer()->set_kind(SGD);
  s.mutable_optimizer()->set_learning_rate(0.1f);
  s.mutable_optimizer()->set_momentum(0.9f);
  TensorSpec* w = s.add_tensors();
  w->set_name("w");
  w->add_shape(300);
  w->mutable_init()->set_kind(GLOROT_UNIFORM);
  return s;
}

struct PsdUnderTest {
  std::unique_ptr<Shard> shard;
  std::unique_ptr<PsService> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
  std::unique_ptr<ParameterServer::Stub> stub;
};

class PsServiceReshardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (uint32_t i = 0; i < 2; ++i) {
      PsdUnderTest& p = psds_[i];
      ShardOptions options;
      options.shard_id = i;
      options.fetch_batch_bytes = 1000;  // several calls
      p.shard = std::make_unique<Shard>(options);
      p.shard->SetChunkFetcher([this](const std::string& a,
                                      const FetchChunksRequest& r, absl::Time d,
                                      FetchChunksResponse* out) {
        return fetcher_.Fetch(a, r, d, out);
      });
      p.service = std::make_unique<PsService>(p.shard.get(), &security_);
      grpc::ServerBuilder builder;
      int port = 0;
      builder.AddListeningPort("127.0.0.1:0", security_.ServerCredentials(),
                               &port);
      ApplyTransportSettings(4 << 20, &builder);
      builder.RegisterService(p.service.get());
      p.server = builder.BuildAndStart();
      ASSERT_NE(p.server, nullptr);
      p.address = absl::StrCat("127.0.0.1:", port);
      p.stub = ParameterServer::NewStub(security_.NewChannel(p.address));
    }
  }
  void TearDown() override {
    for (PsdUnderTest& p : psds_) {
      p.shard->Shutdown();
      p.server->Shutdown();
    }
  }

  grpc::Status Call(uint32_t i, ReshardRequest req, ReshardResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    if (req.phase() == ReshardRequest::PREPARE) {
      for (const PsdUnderTest& p : psds_) req.add_shard_addresses(p.address);
    }
    return psds_[i].stub->Reshard(&ctx, req, resp);
  }

  // Every chunk of the job, pulled from its shard under `placement`.
  std::vector<std::string> Pull(const Placement& placement,
                                grpc::StatusCode* code = nullptr) {
    std::vector<std::string> out;
    for (const ChunkPlacement& c : placement.chunks()) {
      PullRequest req;
      req.set_job_id("j");
      req.set_placement_epoch(placement.epoch());
      req.add_chunk_ids(c.chunk_id());
      PullResponse resp;
      grpc::ClientContext ctx;
      const grpc::Status st = psds_[c.shard()].stub->Pull(&ctx, req, &resp);
      if (code != nullptr) *code = st.error_code();
      if (!st.ok() || resp.parameters_size() != 1) return {};
      out.push_back(resp.parameters(0).data());
    }
    return out;
  }

  Security security_;
  GrpcChunkFetcher fetcher_{&security_, 4 << 20};
  PsdUnderTest psds_[2];
};

TEST_F(PsServiceReshardTest, MovesChunksBetweenTwoPsdsOverGrpc) {
  RegisterJobRequest reg;
  reg.set_job_id("j");
  *reg.mutable_spec() = TwoTensorSpec();
  reg.set_num_workers(1);
  reg.mutable_placement()->set_num_shards(2);
  for (ChunkPlacement& c : CutIntoChunks(reg.spec())) {
    c.set_shard(0);
    *reg.mutable_placement()->add_chunks() = c;
  }
  for (PsdUnderTest& p : psds_) {
    grpc::ClientContext ctx;
    RegisterJobResponse resp;
    ASSERT_TRUE(p.stub->RegisterJob(&ctx, reg, &resp).ok());
  }
  const std::vector<std::string> before = Pull(reg.placement());
  ASSERT_EQ(before.size(), 3u);
  Placement to = reg.placement();
  to.set_epoch(1);
  for (ChunkPlacement& c : *to.mutable_chunks()) c.set_shard(c.chunk_id() % 2);
  ReshardRequest req;
  req.set_job_id("j");
  req.set_epoch(1);
  std::vector<ReshardResponse> resp(2);
  for (auto phase : {ReshardRequest::PAUSE, ReshardRequest::PREPARE,
                     ReshardRequest::COMMIT}) {
    req.set_phase(phase);
    req.set_pause_step(phase == ReshardRequest::PAUSE ? 1 : 0);
    if (phase == ReshardRequest::PREPARE) *req.mutable_placement() = to;
    // Version 0 everywhere: pausing at 1 needs a step first.
    if (phase == ReshardRequest::PAUSE) {
      PushPullRequest push;
      push.set_job_id("j");
      for (const ChunkPlacement& c : reg.placement().chunks()) {
        ChunkData* g = push.add_gradients();
        g->set_chunk_id(c.chunk_id());
        g->set_data(std::string(c.length() * 4, '\0'));
      }
      PushPullResponse answer;
      grpc::ClientContext ctx;
      ASSERT_TRUE(psds_[0].stub->PushPull(&ctx, push, &answer).ok());
    }
    for (uint32_t i = 0; i < 2; ++i) {
      const grpc::Status st = Call(i, req, &resp[i]);
      ASSERT_TRUE(st.ok()) << phase << " " << i << ": " << st.error_message();
    }
    if (phase == ReshardRequest::PAUSE) {
      EXPECT_TRUE(resp[0].quiesced());
    }
    if (phase == ReshardRequest::PREPARE) {
      EXPECT_EQ(resp[1].chunks_fetched(), 1u);  // chunk 1
      EXPECT_EQ(resp[0].chunks_held(), 2u);
    }
  }
  // A zero gradient moved nothing but the version: the values are those
  // of before, now served from their new shards.
  EXPECT_EQ(Pull(to), before);
  grpc::StatusCode code = grpc::StatusCode::OK;
  EXPECT_TRUE(Pull(reg.placement(), &code).empty());
  EXPECT_EQ(code, grpc::StatusCode::ABORTED);
}

}  // namespace
}  // namespace ps
