#include "worker/client/testing/fake_parameter_client.h"

#include <cmath>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(FakeParameterServerTest, AppliesSgd) {
  FakeParameterServer::Options options;
  options.learning_rate = 0.5f;
  FakeParameterServer server({1.0f, 2.0f}, options);
  auto client = server.NewClient(0);
  std::vector<float> params(2);
  ASSERT_TRUE(client->Pull(0, absl::MakeSpan(params)).ok());
  EXPECT_THAT(params, ElementsAre(1.0f, 2.0f));
  const std::vector<float> grad = {2.0f, -4.0f};
  ASSERT_TRUE(client->PushPull(0, grad, absl::MakeSpan(params)).ok());
  EXPECT_THAT(params, ElementsAre(0.0f, 4.0f));
  EXPECT_EQ(server.version(), 1u);
}

TEST(FakeParameterServerTest, AppliesMomentum) {
  FakeParameterServer::Options options;
  options.learning_rate = 1.0f;
  options.momentum = 0.5f;
  FakeParameterServer server({0.0f}, options);
  auto client = server.NewClient(0);
  std::vector<float> params(1);
  const std::vector<float> grad = {1.0f};
  ASSERT_TRUE(client->PushPull(0, grad, absl::MakeSpan(params)).ok());
  EXPECT_EQ(params[0], -1.0f);  // v = 1
  ASSERT_TRUE(client->PushPull(1, grad, absl::MakeSpan(params)).ok());
  EXPECT_EQ(params[0], -2.5f);  // v = 1.5
}

TEST(FakeParameterServerTest, BspAveragesInRankOrder) {
  FakeParameterServer::Options options;
  options.learning_rate = 1.0f;
  options.num_workers = 2;
  FakeParameterServer server({10.0f}, options);
  auto c0 = server.NewClient(0);
  auto c1 = server.NewClient(1);
  std::vector<float> p0(1), p1(1);
  absl::Status s1;
  std::thread t([&] { s1 = c1->PushPull(0, {4.0f}, absl::MakeSpan(p1)); });
  const absl::Status s0 = c0->PushPull(0, {2.0f}, absl::MakeSpan(p0));
  t.join();
  ASSERT_TRUE(s0.ok()) << s0;
  ASSERT_TRUE(s1.ok()) << s1;
  EXPECT_EQ(p0[0], 7.0f);  // 10 - (2 + 4) / 2
  EXPECT_EQ(p1[0], 7.0f);
  EXPECT_EQ(server.pushes(), 2u);
}

TEST(FakeParameterServerTest, DeadlineNamesTheMissingWorker) {
  FakeParameterServer::Options options;
  options.num_workers = 3;
  options.step_deadline = absl::Milliseconds(20);
  FakeParameterServer server({0.0f}, options);
  std::vector<float> p(1);
  const absl::Status s =
      server.NewClient(1)->PushPull(0, {1.0f}, absl::MakeSpan(p));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("missing workers [0,2]"));
}

TEST(FakeParameterServerTest, InjectedFailureHappensOnce) {
  FakeParameterServer server({0.0f}, {});
  server.FailPush(0, 0, absl::UnavailableError("shard down"));
  auto client = server.NewClient(0);
  std::vector<float> p(1);
  EXPECT_EQ(client->PushPull(0, {1.0f}, absl::MakeSpan(p)).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_TRUE(client->PushPull(0, {1.0f}, absl::MakeSpan(p)).ok());
}

TEST(FakeParameterServerTest, RejectsWrongSizes) {
  FakeParameterServer server({0.0f, 0.0f}, {});
  auto client = server.NewClient(0);
  std::vector<float> p(3);
  EXPECT_EQ(client->Pull(0, absl::MakeSpan(p)).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(InitialParametersTest, FollowsTheInitSpecs) {
  TensorSpec w;
  w.set_name("w");
  w.add_shape(3);
  w.add_shape(4);
  w.mutable_init()->set_kind(GLOROT_UNIFORM);
  TensorSpec b;
  b.set_name("b");
  b.add_shape(4);
  b.mutable_init()->set_kind(CONSTANT);
  b.mutable_init()->set_value(0.5f);
  absl::StatusOr<std::vector<float>> p = InitialParameters(7, {w, b});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->size(), 16u);
  const float a = std::sqrt(6.0f / 7.0f);
  for (int i = 0; i < 12; ++i) EXPECT_LE(std::abs((*p)[i]), a);
  for (int i = 12; i < 16; ++i) EXPECT_EQ((*p)[i], 0.5f);
  EXPECT_EQ(*p, *InitialParameters(7, {w, b}));
}

}  // namespace
}  // namespace ps
