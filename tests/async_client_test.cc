// AsyncPsClient against the real shard service (Shard + PsService in this
// process on 127.0.0.1:0, through tools/psbench/psbench_cluster): the async
// path ends bitwise where the blocking one does, and a Push-only request (the
// protobuf-served Push method) followed by a Pull matches a PushPull.
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tools/psbench/psbench_cluster.h"
#include "worker/client/async_ps_client.h"
#include "worker/client/ps_client.h"

namespace ps {
namespace {

constexpr uint64_t kFloats = 300000;  // several chunks on each shard

class AsyncClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<bench::BenchCluster>> c =
        bench::BenchCluster::StartInProcess(2);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = *std::move(c);
    grad_.resize(kFloats);
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 0.01f);
    for (float& g : grad_) g = normal(rng);
  }

  // A job of kFloats floats (same seed, so the same initial values).
  Assignment Job(const std::string& id, ConsistencyMode mode,
                 const WireSpec& wire = WireSpec()) {
    bench::BenchJob job;
    job.job_id = id;
    job.floats = kFloats;
    job.mode = mode;
    job.partition_bytes = 256 << 10;
    job.wire = wire;
    absl::StatusOr<Assignment> a = cluster_->RegisterJob(job);
    EXPECT_TRUE(a.ok()) << a.status();
    return a.ok() ? *a : Assignment();
  }

  std::unique_ptr<AsyncPsClient> Async(const Assignment& a,
                                       bool delta_pulls = true) {
    PsClientOptions options;
    options.max_request_bytes = 400 << 10;  // several requests per shard
    options.delta_pulls = delta_pulls;
    absl::StatusOr<std::unique_ptr<AsyncPsClient>> c =
        AsyncPsClient::Create(options, a, &cluster_->security());
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  // One BSP step through the blocking PsClient: the reference.
  std::vector<float> BlockingStep(const Assignment& a) {
    absl::StatusOr<std::unique_ptr<PsClient>> c =
        PsClient::Create(PsClientOptions(), a, &cluster_->security());
    EXPECT_TRUE(c.ok()) << c.status();
    std::vector<float> params(kFloats);
    EXPECT_TRUE((*c)->Pull(0, absl::MakeSpan(params)).ok());
    EXPECT_TRUE((*c)->PushPull(0, grad_, absl::MakeSpan(params)).ok());
    return params;
  }

  std::unique_ptr<bench::BenchCluster> cluster_;
  std::vector<float> grad_;
};

TEST_F(AsyncClientTest, AsyncPushPullEndsBitwiseWhereBlockingDoes) {
  const std::vector<float> expected = BlockingStep(Job("blocking", BSP));
  std::unique_ptr<AsyncPsClient> client = Async(Job("async", BSP));
  ASSERT_NE(client, nullptr);
  std::vector<float> params(kFloats);
  ParamRequest pull;
  pull.op = ParamOp::kPull;
  pull.params = absl::MakeSpan(params);
  ASSERT_TRUE(client->Wait(client->Start(std::move(pull))).ok());
  absl::Notification called;
  ParamRequest push;
  push.op = ParamOp::kPushPull;
  push.gradient = grad_;
  push.params = absl::MakeSpan(params);
  push.priority = 7;
  push.done = [&](const absl::Status& s) {
    EXPECT_TRUE(s.ok()) << s;
    called.Notify();
  };
  RequestHandle h = client->Start(std::move(push));
  ASSERT_TRUE(client->Wait(h, absl::Now() + absl::Seconds(60)).ok());
  EXPECT_TRUE(called.HasBeenNotified());  // before Wait returned
  ASSERT_EQ(params.size(), expected.size());
  for (size_t i = 0; i < kFloats; ++i) ASSERT_EQ(params[i], expected[i]) << i;
}

TEST_F(AsyncClientTest, PushThenPullMatchesPushPull) {
  const std::vector<float> expected = BlockingStep(Job("pushpull", ASP));
  std::unique_ptr<AsyncPsClient> client = Async(Job("push", ASP));
  ASSERT_NE(client, nullptr);
  ParamRequest push;
  push.op = ParamOp::kPush;
  push.gradient = grad_;
  ASSERT_TRUE(client->Wait(client->Start(std::move(push))).ok());
  std::vector<float> params(kFloats);
  ParamRequest pull;
  pull.op = ParamOp::kPull;
  pull.step = 1;
  pull.params = absl::MakeSpan(params);
  ASSERT_TRUE(client->Wait(client->Start(std::move(pull))).ok());
  for (size_t i = 0; i < kFloats; ++i) ASSERT_EQ(params[i], expected[i]) << i;
}

// Delta pulls: one request of `op` on the whole model into `params`.
absl::Status Exchange(AsyncPsClient& client, ParamOp op, uint64_t step,
                      const std::vector<float>& grad,
                      std::vector<float>* params) {
  ParamRequest r;
  r.op = op;
  r.step = step;
  if (op != ParamOp::kPull) r.gradient = grad;
  r.params = absl::MakeSpan(*params);
  return client.Wait(client.Start(std::move(r)));
}

TEST_F(AsyncClientTest, DeltaPullsLandBitwiseOnTheBufferThatHoldsTheBase) {
  WireSpec topk;
  topk.set_topk_fraction(0.01f);
  const Assignment a = Job("delta", ASP, topk);
  std::unique_ptr<AsyncPsClient> client = Async(a);
  std::unique_ptr<AsyncPsClient> reader = Async(a, /*delta_pulls=*/false);
  ASSERT_NE(client, nullptr);
  ASSERT_NE(reader, nullptr);
  std::vector<float> params(kFloats), other(kFloats), full(kFloats);
  ASSERT_TRUE(Exchange(*client, ParamOp::kPull, 0, grad_, &params).ok());
  EXPECT_EQ(client->stats().delta_chunks, 0u);  // held nothing yet
  for (uint64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(
        Exchange(*client, ParamOp::kPushPull, step, grad_, &params).ok());
    ASSERT_TRUE(Exchange(*reader, ParamOp::kPull, 0, grad_, &full).ok());
    EXPECT_EQ(params, full) << "step " << step;
  }
  const PsClientStats s = client->stats();
  const size_t chunks = client->plan().chunks().size();
  EXPECT_EQ(s.delta_chunks, 3 * chunks);
  // 1% of the entries as offset + value, instead of every value.
  EXPECT_LT(s.bytes_received, s.dense_bytes_received / 2);
  EXPECT_EQ(reader->stats().delta_chunks, 0u);
  // Another buffer holds nothing: in full; then it holds the base. The
  // first buffer is no longer what the client last wrote: in full.
  ASSERT_TRUE(Exchange(*client, ParamOp::kPull, 0, grad_, &other).ok());
  EXPECT_EQ(client->stats().delta_chunks, 3 * chunks);
  EXPECT_EQ(other, full);
  ASSERT_TRUE(Exchange(*client, ParamOp::kPull, 0, grad_, &other).ok());
  EXPECT_EQ(client->stats().delta_chunks, 4 * chunks);
  EXPECT_EQ(other, full);
  ASSERT_TRUE(Exchange(*client, ParamOp::kPull, 0, grad_, &params).ok());
  EXPECT_EQ(client->stats().delta_chunks, 4 * chunks);
  EXPECT_EQ(params, full);
}

}  // namespace
}  // namespace ps
