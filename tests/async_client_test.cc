// AsyncPsClient against the real shard service (Shard + PsService in this
// process on 127.0.0.1:0, through tools/psbench_cluster): the async path
// ends bitwise where the blocking one does, and a Push-only request (the
// protobuf-served Push method) followed by a Pull matches a PushPull.
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tools/psbench_cluster.h"
#include "worker/async_ps_client.h"
#include "worker/ps_client.h"

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
  Assignment Job(const std::string& id, ConsistencyMode mode) {
    bench::BenchJob job;
    job.job_id = id;
    job.floats = kFloats;
    job.mode = mode;
    job.partition_bytes = 256 << 10;
    absl::StatusOr<Assignment> a = cluster_->RegisterJob(job);
    EXPECT_TRUE(a.ok()) << a.status();
    return a.ok() ? *a : Assignment();
  }

  std::unique_ptr<AsyncPsClient> Async(const Assignment& a) {
    PsClientOptions options;
    options.max_request_bytes = 400 << 10;  // several requests per shard
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

}  // namespace
}  // namespace ps
