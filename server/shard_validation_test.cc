// Shard tests. Bad input: rejected whole, named, counted, and nothing changes.
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace shard_test {
namespace {

using ::testing::HasSubstr;

// A push that must be refused: the valid request with one thing wrong.
struct BadPush {
  std::string name;
  PushPullRequest req;
  absl::StatusCode code;
  std::string want;    // substring of the message
  std::string reason;  // JobStats.rejected key ("" = shard-level)
};

// The valid push of worker 1, step 0, to the chunks of shard 0 of 2.
PushPullRequest ValidPush(const RegisterJobRequest& reg) {
  return PushRequestFor<PushPullRequest>(reg, 1, 0, {0, 2}, 0);
}

BadPush Bad(std::string name, const RegisterJobRequest& reg,
            const std::function<void(PushPullRequest*)>& mutate,
            absl::StatusCode code, std::string want, std::string reason) {
  PushPullRequest req = ValidPush(reg);
  mutate(&req);
  return {std::move(name), std::move(req), code, std::move(want),
          std::move(reason)};
}

// Wrong addressing: job, chunk ids, worker, size.
std::vector<BadPush> BadAddressCases(const RegisterJobRequest& asp) {
  using C = absl::StatusCode;
  return {
      Bad(
          "wrong_size", asp,
          [](auto* r) {
            r->mutable_gradients(1)->mutable_data()->resize(1000);
          },
          C::kInvalidArgument,
          "gradients[1].data: 1000 bytes, expected 400 (100 elements of "
          "FP32); chunk 2 of tensor w holds 100 floats",
          "wrong_size"),
      Bad(
          "unknown_job", asp, [](auto* r) { r->set_job_id("nope"); },
          C::kFailedPrecondition, "job_id: no job \"nope\" on shard 0", ""),
      Bad(
          "unknown_chunk", asp,
          [](auto* r) { r->mutable_gradients(1)->set_chunk_id(9); },
          C::kInvalidArgument,
          "gradients[1].chunk_id: 9 out of range, job \"asp\" has 4 chunks",
          "unknown_chunk"),
      Bad(
          "chunk_on_other_shard", asp,
          [](auto* r) { r->mutable_gradients(1)->set_chunk_id(3); },
          C::kInvalidArgument,
          "gradients[1].chunk_id: chunk 3 of tensor b is on shard 1, not shard "
          "0",
          "chunk_not_on_shard"),
      Bad(
          "duplicate_chunk", asp,
          [](auto* r) { r->mutable_gradients(1)->set_chunk_id(0); },
          C::kInvalidArgument,
          "gradients[1].chunk_id: chunk 0 also in gradients[0]",
          "duplicate_chunk"),
      Bad(
          "worker_out_of_range", asp, [](auto* r) { r->set_worker(2); },
          C::kInvalidArgument, "worker: rank 2 out of range [0, 2)",
          "worker_out_of_range"),
  };
}

// Wrong values: non-finite elements, versions and steps ahead.
std::vector<BadPush> BadValueCases(const RegisterJobRequest& asp,
                                   const RegisterJobRequest& bsp) {
  using C = absl::StatusCode;
  return {
      Bad(
          "nan", asp,
          [](auto* r) {
            std::vector<float> g = Floats(r->gradients(1).data());
            g[17] = NAN;
            r->mutable_gradients(1)->set_data(Bytes(g));
          },
          C::kInvalidArgument, "gradients[1].data: element 17 is NaN",
          "non_finite"),
      Bad(
          "inf", asp,
          [](auto* r) {
            std::vector<float> g = Floats(r->gradients(0).data());
            g[99] = -INFINITY;
            r->mutable_gradients(0)->set_data(Bytes(g));
          },
          C::kInvalidArgument, "gradients[0].data: element 99 is Inf",
          "non_finite"),
      Bad(
          "version_ahead", asp,
          [](auto* r) { r->mutable_gradients(1)->set_version(7); },
          C::kInvalidArgument,
          "gradients[1].version: 7 is ahead of chunk 2 of tensor w at version "
          "1",
          "version_ahead"),
      Bad(
          "future_step", bsp, [](auto* r) { r->set_step(1); },
          C::kInvalidArgument,
          "step: 1 is ahead of chunk 0 of tensor w at version 0",
          "future_step"),
  };
}

// Sends `c` through both entry points, the waiting PushPull and the unary
// Push: each fails with the case's code and message, is counted, and
// changes no parameter.
void ExpectRejectedAndNothingChanges(Shard& shard, const BadPush& c) {
  const uint64_t asp_before = Checksum(shard, "asp");
  const uint64_t bsp_before = Checksum(shard, "bsp");
  const std::string job = c.req.job_id() == "bsp" ? "bsp" : "asp";
  const uint64_t count_before =
      c.reason.empty() ? 0 : Rejected(StatsOf(shard, job), c.reason);
  auto call = StartPushPull(shard, c.req);
  ASSERT_TRUE(call->done.HasBeenNotified()) << c.name;
  EXPECT_EQ(call->status.code(), c.code) << c.name << ": " << call->status;
  EXPECT_THAT(std::string(call->status.message()), HasSubstr(c.want)) << c.name;
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

TEST(ShardBadInputTest, RejectedWholeNamedCountedAndNothingChanges) {
  // Shard 0 of 2 holds chunks 0 and 2 of each job.
  Shard shard(ShardOptions{});
  RegisterJobResponse resp;
  const RegisterJobRequest asp = Registration("asp", Spec(ASP, 2), 2);
  const RegisterJobRequest bsp = Registration("bsp", Spec(BSP, 2), 2);
  ASSERT_TRUE(shard.RegisterJob(asp, &resp).ok());
  ASSERT_TRUE(shard.RegisterJob(bsp, &resp).ok());
  ASSERT_EQ(resp.chunks_held(), 2u);
  // Move both jobs off version 0 so "ahead" checks have room.
  PushResponse first_push;
  ASSERT_TRUE(
      shard.Push(PushRequestFor<PushRequest>(asp, 0, 0, {0, 2}, 0), &first_push)
          .ok());

  const uint64_t asp_before = Checksum(shard, "asp");
  std::vector<BadPush> cases = BadAddressCases(asp);
  for (BadPush& c : BadValueCases(asp, bsp)) cases.push_back(std::move(c));
  for (const BadPush& c : cases) ExpectRejectedAndNothingChanges(shard, c);
  ShardStats stats;
  shard.Stats(StatsRequest(), &stats);
  EXPECT_EQ(stats.rejected().at("unknown_job"), 2u);
  EXPECT_EQ(shard.PendingWaits(), 0u);

  // The same valid request is accepted afterwards: the cases above failed
  // for their own reason only.
  auto ok = StartPushPull(shard, ValidPush(asp));
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
