// The Shard's SparseExchange: registration creates a job's tables, bad
// requests are rejected and counted while the tables and other jobs stay as
// they were, stats report each table, and DropJob fails a waiting call.
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace {

using shard_test::IdsOfShard;
using shard_test::Options;
using shard_test::Registration;
using shard_test::SparseSpec;
using shard_test::Spec;
using ::testing::HasSubstr;

std::string Ids(const std::vector<uint64_t>& ids) {
  return std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 8);
}

std::vector<float> Values(const std::string& bytes) {
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

// Ids of shard `shard` of 2.
std::vector<uint64_t> IdsOf(uint32_t shard, size_t n) {
  return IdsOfShard(shard, 2, n);
}

struct Call {
  SparseExchangeRequest req;
  SparseExchangeResponse resp;
  std::optional<absl::Status> status;
};

std::unique_ptr<Call> NewCall(const std::string& job, uint32_t worker,
                              uint64_t step, const std::vector<uint64_t>& ids,
                              float grad) {
  auto c = std::make_unique<Call>();
  c->req.set_job_id(job);
  c->req.set_worker(worker);
  c->req.set_step(step);
  c->req.set_push(true);
  SparseRows* g = c->req.add_gradients();
  g->set_table("emb");
  g->set_ids(Ids(ids));
  std::vector<float> values(ids.size() * 4, grad);
  g->set_values(std::string(reinterpret_cast<const char*>(values.data()),
                            values.size() * 4));
  SparseRows* p = c->req.add_pull();
  p->set_table("emb");
  p->set_ids(Ids(ids));
  return c;
}

void Exchange(Shard& shard, Call& c) {
  shard.SparseExchange(c.req, &c.resp,
                       [&c](absl::Status s) { c.status = std::move(s); });
}

class ShardSparseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* id : {"a", "b"}) {
      RegisterJobResponse resp;
      ASSERT_TRUE(
          shard_.RegisterJob(Registration(id, SparseSpec(BSP, 1), 2), &resp)
              .ok());
    }
  }
  Shard shard_{Options(0)};
};

TEST_F(ShardSparseTest, PushPullUpdatesRowsAndStatsReportTheTable) {
  const std::vector<uint64_t> ids = IdsOf(0, 3);
  auto c = NewCall("a", 0, 0, ids, 2);
  Exchange(shard_, *c);
  ASSERT_TRUE(c->status.has_value() && c->status->ok()) << *c->status;
  ASSERT_EQ(c->resp.rows_size(), 1);
  // Adagrad from 1: 1 - 0.5 * 2 / (sqrt(4) + eps) = 0.5.
  for (float v : Values(c->resp.rows(0).values())) EXPECT_FLOAT_EQ(v, 0.5f);
  EXPECT_EQ(c->resp.version(), 1u);

  ShardStats stats;
  StatsRequest req;
  req.set_job_id("a");
  shard_.Stats(req, &stats);
  ASSERT_EQ(stats.job_stats_size(), 1);
  const JobStats& js = stats.job_stats(0);
  ASSERT_EQ(js.tables_size(), 1);
  EXPECT_EQ(js.tables(0).name(), "emb");
  EXPECT_EQ(js.tables(0).rows(), 3u);
  EXPECT_EQ(js.tables(0).rows_pushed(), 3u);
  EXPECT_GT(js.tables(0).bytes_used(), 0u);
  EXPECT_EQ(js.tables_version(), 1u);
  EXPECT_EQ(js.tables(0).hottest_size(), 3);
}

TEST_F(ShardSparseTest, BadRequestsFailNamingTheCauseAndChangeNothing) {
  const std::vector<uint64_t> mine = IdsOf(0, 2);
  const std::vector<uint64_t> theirs = IdsOf(1, 1);
  struct Case {
    std::function<void(SparseExchangeRequest*)> change;
    std::string want;
  };
  const std::vector<Case> cases = {
      {[](SparseExchangeRequest* r) {
         r->mutable_gradients(0)->set_table("x");
       },
       "unknown table \"x\" in job a"},
      {[](SparseExchangeRequest* r) {
         r->mutable_gradients(0)->mutable_values()->resize(4);
       },
       "gradients[0].values: 4 bytes, want 32"},
      {[&](SparseExchangeRequest* r) {
         r->mutable_gradients(0)->set_ids(Ids({mine[0], theirs[0]}));
       },
       "belongs to shard 1, not 0"},
      {[](SparseExchangeRequest* r) {
         float nan = std::nanf("");
         std::memcpy(r->mutable_gradients(0)->mutable_values()->data() + 8,
                     &nan, 4);
       },
       "gradients[0].values[2]: nan"},
      {[](SparseExchangeRequest* r) {
         r->mutable_gradients(0)->set_ids(Ids({5000, 5000}));
       },
       "outside table emb (num_ids 1000)"},
  };
  for (const Case& c : cases) {
    auto call = NewCall("a", 0, 0, mine, 1);
    c.change(&call->req);
    Exchange(shard_, *call);
    ASSERT_TRUE(call->status.has_value());
    EXPECT_EQ(call->status->code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(call->status->message(), HasSubstr(c.want));
  }
  ShardStats stats;
  shard_.Stats(StatsRequest(), &stats);
  ASSERT_EQ(stats.job_stats_size(), 2);
  EXPECT_EQ(stats.job_stats(0).rejected().at("sparse_bad_request"),
            cases.size());
  EXPECT_EQ(stats.job_stats(0).tables(0).rows(), 0u);
  EXPECT_EQ(stats.job_stats(0).tables_version(), 0u);

  // The other job, and the same job, still work.
  for (const char* job : {"b", "a"}) {
    auto ok = NewCall(job, 0, 0, mine, 2);
    Exchange(shard_, *ok);
    ASSERT_TRUE(ok->status.has_value() && ok->status->ok()) << *ok->status;
    for (float v : Values(ok->resp.rows(0).values())) EXPECT_FLOAT_EQ(v, 0.5f);
  }
}

TEST(ShardSparseRegistrationTest, JobsWithoutTablesAndBadTablesAreRefused) {
  Shard shard(Options(0));
  RegisterJobResponse resp;
  ASSERT_TRUE(
      shard.RegisterJob(Registration("dense", Spec(BSP, 1), 1), &resp).ok());
  auto c = NewCall("dense", 0, 0, {1}, 1);
  Exchange(shard, *c);
  EXPECT_THAT(c->status->message(), HasSubstr("has no sparse tables"));

  JobSpec bad = SparseSpec(BSP, 1);
  bad.mutable_tables(0)->set_dim(0);
  const absl::Status s = shard.RegisterJob(Registration("bad", bad, 1), &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("spec.tables[0].dim: must be in"));
}

TEST(ShardSparseDropTest, DropJobFailsAWaitingCall) {
  Shard shard(Options(0));
  RegisterJobResponse resp;
  ASSERT_TRUE(
      shard.RegisterJob(Registration("j", SparseSpec(BSP, 2), 1), &resp).ok());
  auto c = NewCall("j", 0, 0, {1, 2}, 1);
  Exchange(shard, *c);
  EXPECT_FALSE(c->status.has_value()) << "waits for worker 1";
  DropJobRequest drop;
  drop.set_job_id("j");
  ASSERT_TRUE(shard.DropJob(drop).ok());
  ASSERT_TRUE(c->status.has_value());
  EXPECT_EQ(c->status->code(), absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace ps
