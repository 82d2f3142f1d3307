// Shard tests. Bad input: rejected whole, named, counted, and nothing changes.
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "server/shard_test_util.h"

namespace ps {
namespace shard_test {
namespace {

using ::testing::HasSubstr;

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

}  // namespace
}  // namespace shard_test
}  // namespace ps
