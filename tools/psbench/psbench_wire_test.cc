// The zero-copy wire path that psbench measures: PsClient encodes its
// requests and decodes the replies by hand, and PsService writes its replies
// by hand (core/wire_codec.cc, used by worker/client/async_ps_client.cc and
// server/rpc/ps_service.cc). These tests hold
// both to proto/ps.proto: byte-identical to protobuf where protobuf would
// write the message, and tolerant of everything else a protobuf peer may
// legally send (fields out of order, unknown fields, default values left
// out, payloads split across many slices).
//
//   bazel test //tools/psbench:psbench_wire_test
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/security.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "proto/ps.grpc.pb.h"
#include "server/rpc/ps_service.h"
#include "server/shard.h"
#include "tools/psbench/psbench_cluster.h"
#include "worker/client/ps_client.h"
#include "worker/client/shard_wire.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

grpc::ByteBuffer ToBuffer(const std::string& bytes) {
  grpc::Slice s(bytes);
  return grpc::ByteBuffer(&s, 1);
}

// Protobuf wire helpers, for replies protobuf itself would never write.
void Varint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
void Tag(uint32_t field, uint32_t wire, std::string* out) {
  Varint(field << 3 | wire, out);
}
void Bytes(uint32_t field, const std::string& b, std::string* out) {
  Tag(field, 2, out);
  Varint(b.size(), out);
  *out += b;
}

std::string FloatBytes(const std::vector<float>& v, size_t offset, size_t n) {
  return std::string(reinterpret_cast<const char*>(v.data() + offset),
                     n * sizeof(float));
}

// A ParameterServer whose PushPull / Pull answer from a script, recording
// the raw requests. Other methods are not used.
class ScriptedServer final
    : public ParameterServer::WithRawCallbackMethod_PushPull<
          ParameterServer::WithRawCallbackMethod_Pull<
              ParameterServer::CallbackService>> {
 public:
  using Script = std::function<grpc::Status(const std::string& request,
                                            std::string* reply)>;

  explicit ScriptedServer(Script script) : script_(std::move(script)) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~ScriptedServer() override {
    server_->Shutdown(absl::ToChronoTime(absl::Now()));
  }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  std::vector<std::string> requests() {
    absl::MutexLock l(&mu_);
    return requests_;
  }

  grpc::ServerUnaryReactor* PushPull(grpc::CallbackServerContext* ctx,
                                     const grpc::ByteBuffer* req,
                                     grpc::ByteBuffer* resp) override {
    return Answer(ctx, req, resp);
  }
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx,
                                 const grpc::ByteBuffer* req,
                                 grpc::ByteBuffer* resp) override {
    return Answer(ctx, req, resp);
  }

 private:
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* ctx,
                                   const grpc::ByteBuffer* req,
                                   grpc::ByteBuffer* resp) {
    std::string request = Flatten(*req);
    std::string reply;
    grpc::Status status = script_(request, &reply);
    {
      absl::MutexLock l(&mu_);
      requests_.push_back(request);
    }
    if (status.ok()) *resp = ToBuffer(reply);
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(status);
    return reactor;
  }

  Script script_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex mu_;
  std::vector<std::string> requests_ ABSL_GUARDED_BY(mu_);
};

// One tensor "w" of sum(lengths) floats cut into chunks of `lengths` (ids
// in order), all on shard 0 of one shard at `address`.
Assignment OneShardAssignment(const std::vector<uint64_t>& lengths,
                              const std::string& address,
                              ConsistencyMode mode = ASP) {
  Assignment a;
  a.set_job_id("job-w");
  a.set_rank(1);
  a.set_num_workers(2);
  uint64_t total = 0;
  for (uint64_t n : lengths) total += n;
  TensorSpec* t = a.mutable_spec()->add_tensors();
  t->set_name("w");
  t->add_shape(total);
  a.mutable_spec()->mutable_consistency()->set_mode(mode);
  a.mutable_placement()->set_num_shards(1);
  uint64_t offset = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    ChunkPlacement* c = a.mutable_placement()->add_chunks();
    c->set_chunk_id(static_cast<uint32_t>(i));
    c->set_tensor("w");
    c->set_index(static_cast<uint32_t>(i));
    c->set_offset(offset);
    c->set_length(lengths[i]);
    offset += lengths[i];
  }
  a.add_shard_addresses(address);
  return a;
}

std::vector<float> Ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = scale * (static_cast<float>(i % 1000) - 500.0f);
  return v;
}

// The protobuf reply to a PushPullRequest: every pushed chunk with
// `params` data and version `version`.
std::string ProtoReply(const PushPullRequest& req,
                       const std::vector<uint64_t>& offsets,
                       const std::vector<float>& params, uint64_t version) {
  PushPullResponse resp;
  for (const ChunkData& g : req.gradients()) {
    ChunkData* d = resp.add_parameters();
    d->set_chunk_id(g.chunk_id());
    d->set_version(version);
    d->set_data(FloatBytes(params, offsets[g.chunk_id()],
                           g.data().size() / sizeof(float)));
  }
  resp.set_duplicates(1);
  return resp.SerializeAsString();
}

std::vector<uint64_t> Offsets(const std::vector<uint64_t>& lengths) {
  std::vector<uint64_t> offsets;
  uint64_t at = 0;
  for (uint64_t n : lengths) {
    offsets.push_back(at);
    at += n;
  }
  return offsets;
}

TEST(PsClientWireTest, PushPullRequestIsByteIdenticalToProtobufAndRepliesLand) {
  // Chunk 0 (id and version 0 are left off the wire), ids past one varint
  // byte, a large chunk that gRPC splits across frames.
  std::vector<uint64_t> lengths(300, 3);
  lengths[7] = 300000;
  const std::vector<uint64_t> offsets = Offsets(lengths);
  uint64_t total = 0;
  for (uint64_t n : lengths) total += n;
  const std::vector<float> server_params = Ramp(total, 0.25f);
  ScriptedServer server([&](const std::string& request, std::string* reply) {
    PushPullRequest req;
    if (!req.ParseFromString(request))
      return grpc::Status(grpc::StatusCode::INTERNAL, "parse");
    *reply = ProtoReply(req, offsets, server_params, (1ull << 40) + req.step());
    return grpc::Status::OK;
  });
  Security security;
  PsClientOptions options;
  options.max_request_bytes = 3u << 20;  // the whole model in one request
  auto client = PsClient::Create(
      options, OneShardAssignment(lengths, server.address()), &security);
  ASSERT_TRUE(client.ok()) << client.status();
  const std::vector<float> grad = Ramp(total, -0.5f);
  std::vector<float> params(total, 0.0f);
  for (uint64_t step : {0u, 1u}) {
    ASSERT_TRUE((*client)->PushPull(step, grad, absl::MakeSpan(params)).ok());
    EXPECT_EQ(params, server_params);
  }
  const std::vector<std::string> requests = server.requests();
  ASSERT_EQ(requests.size(), 2u);
  for (uint64_t step : {0u, 1u}) {
    PushPullRequest expected;
    expected.set_job_id("job-w");
    expected.set_worker(1);
    expected.set_step(step);
    expected.set_attempt(1);
    for (size_t i = 0; i < lengths.size(); ++i) {
      ChunkData* g = expected.add_gradients();
      g->set_chunk_id(static_cast<uint32_t>(i));
      // The second push carries the versions the first reply returned.
      g->set_version(step == 0 ? 0 : (1ull << 40));
      g->set_data(FloatBytes(grad, offsets[i], lengths[i]));
    }
    EXPECT_TRUE(requests[step] == expected.SerializeAsString())
        << "step " << step;
  }
}

// Pulls every parameter of a one-shard job (chunk lengths `lengths`, 5
// floats in all) from a shard that answers with the bytes `reply`.
absl::Status PullFromScriptedReply(const std::vector<uint64_t>& lengths,
                                   const std::string& reply,
                                   std::vector<float>* params) {
  ScriptedServer server([&](const std::string&, std::string* r) {
    *r = reply;
    return grpc::Status::OK;
  });
  Security security;
  auto client = PsClient::Create(PsClientOptions(),
                                 OneShardAssignment(lengths, server.address()),
                                 &security);
  if (!client.ok()) return client.status();
  params->assign(5, 0.0f);
  return (*client)->Pull(0, absl::MakeSpan(*params));
}

TEST(PsClientWireTest, DecodesEveryLegalEncodingOfTheReply) {
  const std::vector<uint64_t> lengths = {2, 3};
  const std::vector<float> values = {1.5f, -2.0f, 3.25f, 4.0f, -5.5f};
  const std::string c0 = FloatBytes(values, 0, 2),
                    c1 = FloatBytes(values, 2, 3);
  struct Case {
    std::string name;
    std::string reply;
  };
  std::vector<Case> cases;
  {
    // Fields in reverse order, the default chunk_id 0 written out,
    // unknown fields of every wire type in both messages, and the trailing
    // counters before the chunks.
    std::string r, d0, d1;
    Tag(2, 0, &r);
    Varint(3, &r);  // duplicates
    Bytes(3, c0, &d0);
    Tag(2, 0, &d0);
    Varint(9, &d0);  // version
    Tag(1, 0, &d0);
    Varint(0, &d0);  // chunk_id 0, explicitly
    Tag(15, 5, &d0);
    d0 += std::string(4, 'x');  // unknown fixed32
    Bytes(1, d0, &r);
    Tag(99, 1, &r);
    r += std::string(8, 'y');  // unknown fixed64 between the chunks
    Tag(7, 2, &d1);
    Varint(2, &d1);
    d1 += "zz";  // unknown bytes
    Bytes(3, c1, &d1);
    Tag(1, 0, &d1);
    Varint(1, &d1);
    Bytes(1, d1, &r);
    Tag(4, 0, &r);
    Varint(1ull << 62, &r);  // unknown varint
    cases.push_back({"reordered with unknown fields", r});
  }
  {
    // A repeated data field: the last one wins, as in protobuf.
    std::string r, d0, d1;
    Bytes(3, std::string(8, '\0'), &d0);
    Bytes(3, c0, &d0);
    Bytes(1, d0, &r);
    Tag(1, 0, &d1);
    Varint(1, &d1);
    Bytes(3, c1, &d1);
    Bytes(1, d1, &r);
    cases.push_back({"repeated data field", r});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<float> params;
    absl::Status s = PullFromScriptedReply(lengths, c.reply, &params);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(params, values);
  }
}

TEST(PsClientWireTest, RefusesRepliesThatDoNotMatchTheRequest) {
  const std::vector<uint64_t> lengths = {2, 3};
  const std::vector<float> values = {1, 2, 3, 4, 5};
  auto chunk = [&](uint64_t id, const std::string& data) {
    ChunkData d;
    d.set_chunk_id(static_cast<uint32_t>(id));
    d.set_data(data);
    return d;
  };
  auto reply = [](const std::vector<ChunkData>& chunks) {
    PullResponse r;
    for (const ChunkData& c : chunks) *r.add_parameters() = c;
    return r.SerializeAsString();
  };
  const std::string good = reply(
      {chunk(0, FloatBytes(values, 0, 2)), chunk(1, FloatBytes(values, 2, 3))});
  std::string group_wire;  // a field of wire type 3 (start group)
  Tag(5, 3, &group_wire);
  struct Case {
    std::string name;
    std::string reply;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"too few chunks", reply({chunk(0, FloatBytes(values, 0, 2))}),
       "1 chunks, asked for 2"},
      {"too many chunks", good + reply({chunk(1, FloatBytes(values, 2, 3))}),
       "more than the 2"},
      {"wrong chunk",
       reply({chunk(1, FloatBytes(values, 2, 3)),
              chunk(0, FloatBytes(values, 0, 2))}),
       "chunk 1 with 12 bytes; expected chunk 0 with 8"},
      {"wrong size",
       reply({chunk(0, FloatBytes(values, 0, 1)),
              chunk(1, FloatBytes(values, 2, 3))}),
       "chunk 0 with 4 bytes; expected chunk 0 with 8"},
      {"truncated", good.substr(0, good.size() - 3), "returned a"},
      {"group wire type", group_wire + good, "malformed reply"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<float> params;
    absl::Status s = PullFromScriptedReply(lengths, c.reply, &params);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.error));
  }
}

TEST(PsClientWireTest, RetriesKeepTheStepAndCountAttempts) {
  const std::vector<uint64_t> lengths = {4};
  const std::vector<float> values = {1, 2, 3, 4};
  int calls = 0;
  ScriptedServer server([&](const std::string& request, std::string* reply) {
    if (calls++ == 0)
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "restarting");
    PushPullRequest req;
    req.ParseFromString(request);
    *reply = ProtoReply(req, {0}, values, 1);
    return grpc::Status::OK;
  });
  Security security;
  PsClientOptions options;
  options.initial_backoff = absl::Milliseconds(1);
  auto client = PsClient::Create(
      options, OneShardAssignment(lengths, server.address()), &security);
  ASSERT_TRUE(client.ok()) << client.status();
  std::vector<float> grad = {0.5f, 0.5f, 0.5f, 0.5f}, params(4, 0.0f);
  ASSERT_TRUE((*client)->PushPull(7, grad, absl::MakeSpan(params)).ok());
  EXPECT_EQ(params, values);
  const std::vector<std::string> requests = server.requests();
  ASSERT_EQ(requests.size(), 2u);
  for (int attempt = 1; attempt <= 2; ++attempt) {
    PushPullRequest req;
    ASSERT_TRUE(req.ParseFromString(requests[attempt - 1]));
    EXPECT_EQ(req.worker(), 1u);
    EXPECT_EQ(req.step(), 7u);
    EXPECT_EQ(req.attempt(), static_cast<uint32_t>(attempt));
    EXPECT_EQ(req.gradients(0).data(), FloatBytes(grad, 0, 4));
  }
  EXPECT_EQ((*client)->stats().retries, 1u);
}

// PsService against protobuf peers: a stub that serializes with protobuf
// and reads the raw reply bytes.
class PsServiceWireTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<bench::BenchCluster>> c =
        bench::BenchCluster::StartInProcess(1);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = *std::move(c);
    bench::BenchJob job;
    job.job_id = "wire";
    job.floats = kFloats;
    job.mode = ASP;
    job.workers = 2;
    job.partition_bytes = 256 << 10;
    job.learning_rate = 1.0f;  // SGD: p - g exactly
    absl::StatusOr<Assignment> a = cluster_->RegisterJob(job);
    ASSERT_TRUE(a.ok()) << a.status();
    assignment_ = *a;
    stub_ = std::make_unique<grpc::GenericStub>(
        cluster_->security().NewChannel(cluster_->addresses()[0]));
  }

  // Sends `request` bytes to `method`; the reply bytes or the status.
  grpc::Status Call(const std::string& method, const std::string& request,
                    std::string* reply) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    grpc::ByteBuffer req = ToBuffer(request), resp;
    absl::Notification done;
    grpc::Status status;
    stub_->UnaryCall(&ctx, method, grpc::StubOptions(), &req, &resp,
                     [&](grpc::Status s) {
                       status = std::move(s);
                       done.Notify();
                     });
    done.WaitForNotification();
    *reply = Flatten(resp);
    return status;
  }

  static constexpr uint64_t kFloats =
      (1 << 19) + 3;  // 9 chunks, the last short
  std::unique_ptr<bench::BenchCluster> cluster_;
  Assignment assignment_;
  std::unique_ptr<grpc::GenericStub> stub_;
};

TEST_F(PsServiceWireTest, RepliesAreByteIdenticalToProtobufAndCarryTheUpdate) {
  PullRequest pull;
  pull.set_job_id("wire");
  std::string bytes;
  grpc::Status s =
      Call("/ps.ParameterServer/Pull", pull.SerializeAsString(), &bytes);
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  PullResponse before;
  ASSERT_TRUE(before.ParseFromString(bytes));
  EXPECT_EQ(bytes, before.SerializeAsString());
  ASSERT_EQ(before.parameters_size(), assignment_.placement().chunks_size());

  PushPullRequest push;
  push.set_job_id("wire");
  push.set_worker(1);
  push.set_step(0);
  push.set_attempt(1);
  std::vector<std::vector<float>> grads;
  for (const ChunkData& c : before.parameters()) {
    ChunkData* g = push.add_gradients();
    g->set_chunk_id(c.chunk_id());
    std::vector<float> grad =
        Ramp(c.data().size() / sizeof(float), 0.001f * (c.chunk_id() + 1));
    g->set_data(FloatBytes(grad, 0, grad.size()));
    grads.push_back(std::move(grad));
  }
  s = Call("/ps.ParameterServer/PushPull", push.SerializeAsString(), &bytes);
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  PushPullResponse after;
  ASSERT_TRUE(after.ParseFromString(bytes));
  EXPECT_EQ(bytes, after.SerializeAsString());
  ASSERT_EQ(after.parameters_size(), before.parameters_size());
  for (int i = 0; i < after.parameters_size(); ++i) {
    const ChunkData& b = before.parameters(i);
    const ChunkData& a = after.parameters(i);
    EXPECT_EQ(a.chunk_id(), b.chunk_id());
    EXPECT_EQ(a.version(), 1u);
    ASSERT_EQ(a.data().size(), b.data().size());
    const float* p0 = reinterpret_cast<const float*>(b.data().data());
    const float* p1 = reinterpret_cast<const float*>(a.data().data());
    for (size_t k = 0; k < grads[i].size(); ++k) {
      ASSERT_EQ(p1[k], p0[k] - grads[i][k])
          << "chunk " << i << " element " << k;
    }
  }
}

TEST_F(PsServiceWireTest, RefusesBytesThatAreNotTheRequest) {
  std::string bytes;
  for (const char* method :
       {"/ps.ParameterServer/PushPull", "/ps.ParameterServer/Pull"}) {
    grpc::Status s =
        Call(method, std::string("\x0a\xff\xff\xff\xff\x0f", 6), &bytes);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
    EXPECT_THAT(s.error_message(), HasSubstr("request: not a valid")) << method;
  }
}

TEST_F(PsServiceWireTest, PsClientRoundTripsThroughPsService) {
  Assignment a = assignment_;
  a.set_rank(1);
  PsClientOptions options;
  options.max_request_bytes = 600 << 10;  // several requests, both channels
  auto client = PsClient::Create(options, a, &cluster_->security());
  ASSERT_TRUE(client.ok()) << client.status();
  std::vector<float> before(kFloats), after(kFloats), check(kFloats);
  ASSERT_TRUE((*client)->Pull(0, absl::MakeSpan(before)).ok());
  auto grad = std::make_unique<std::vector<float>>(kFloats);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.01f);
  for (float& g : *grad) g = normal(rng);
  ASSERT_TRUE((*client)->PushPull(0, *grad, absl::MakeSpan(after)).ok());
  for (size_t i = 0; i < kFloats; ++i) {
    ASSERT_EQ(after[i], before[i] - (*grad)[i]) << i;
  }
  // PushPull returned, so gRPC let go of the gradient's memory: free it
  // (under ASan, a slice still held would read freed memory) and read the
  // parameters back through a fresh exchange.
  grad.reset();
  ASSERT_TRUE((*client)->Pull(1, absl::MakeSpan(check)).ok());
  EXPECT_EQ(check, after);
}

}  // namespace
}  // namespace ps
