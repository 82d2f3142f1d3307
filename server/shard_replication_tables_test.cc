// Shard tests, a replicated BSP job's sparse tables (JobSpec.replication =
// 2) on two in-process shards whose forwards call each other directly:
// the rows of shard 0 are backed up on shard 1, which serves them, bitwise
// as an unreplicated shard would, once shard 0 is failed over; requests
// naming a copy that is not served, or not held, are refused.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace shard_test {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(30);

// Ids of shard `shard` of 2.
std::vector<uint64_t> IdsOf(uint32_t shard, size_t n) {
  return IdsOfShard(shard, 2, n);
}

struct Call {
  SparseExchangeRequest req;
  SparseExchangeResponse resp;
  absl::Status status;
  absl::Notification done;
};

// Worker `w`'s step `step` on shard 0's rows (a gradient that depends on
// both), pulling them too; `table_shard` < 0: left unset.
std::unique_ptr<Call> Start(Shard& shard, uint32_t w, uint64_t step,
                            int table_shard) {
  auto c = std::make_unique<Call>();
  const std::vector<uint64_t> ids = IdsOf(0, 3);
  c->req.set_job_id("j");
  c->req.set_worker(w);
  c->req.set_step(step);
  c->req.set_push(true);
  if (table_shard >= 0) c->req.set_table_shard(table_shard);
  std::vector<float> g(ids.size() * 4);
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = 0.3f * static_cast<float>(w + 1) + 0.017f * (step * 5 + i);
  }
  const std::string id_bytes(reinterpret_cast<const char*>(ids.data()),
                             ids.size() * 8);
  SparseRows* rows = c->req.add_gradients();
  rows->set_table("emb");
  rows->set_ids(id_bytes);
  rows->set_values(
      std::string(reinterpret_cast<const char*>(g.data()), g.size() * 4));
  SparseRows* pull = c->req.add_pull();
  pull->set_table("emb");
  pull->set_ids(id_bytes);
  Call* raw = c.get();
  shard.SparseExchange(raw->req, &raw->resp, [raw](absl::Status s) {
    raw->status = s;
    raw->done.Notify();
  });
  return c;
}

// Both workers' step; the rows the first pulled.
std::string Step(Shard& shard, uint64_t step, int table_shard) {
  std::unique_ptr<Call> a = Start(shard, 0, step, table_shard);
  std::unique_ptr<Call> b = Start(shard, 1, step, table_shard);
  for (Call* c : {a.get(), b.get()}) {
    EXPECT_TRUE(c->done.WaitForNotificationWithTimeout(kWait));
    EXPECT_TRUE(c->status.ok()) << c->status;
  }
  EXPECT_EQ(a->resp.version(), step + 1);
  return a->resp.rows_size() == 1 ? a->resp.rows(0).values() : "";
}

RegisterJobRequest ReplicatedTablesRegistration() {
  return ReplicatedOnTwo("j", SparseSpec(BSP, 2));
}

class ShardTablesReplicationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const RegisterJobRequest reg = ReplicatedTablesRegistration();
    for (uint32_t s = 0; s < 2; ++s) {
      ShardOptions o = Options(s);
      o.replicate_retry = absl::Milliseconds(5);
      shards_.push_back(std::make_unique<Shard>(o));
      shards_[s]->SetReplicaSender([this](const std::string& address,
                                          const ReplicateRequest& req,
                                          absl::Time) {
        return shards_[address == "s0" ? 0 : 1]->Replicate(req);
      });
      SetReplicaViewResponse resp;
      ASSERT_TRUE(shards_[s]->SetReplicaView(View(1, {}), &resp).ok());
      RegisterJobResponse r;
      ASSERT_TRUE(shards_[s]->RegisterJob(reg, &r).ok());
    }
  }
  void TearDown() override {
    shards_[0].reset();  // its forwards call shard 1
    shards_[1].reset();
  }

  std::vector<std::unique_ptr<Shard>> shards_;
};

TEST_F(ShardTablesReplicationTest, TheBackupServesTheRowsBitwiseAfterFailover) {
  // The same steps on one unreplicated shard.
  Shard reference(Options(0));
  RegisterJobResponse r;
  ASSERT_TRUE(
      reference.RegisterJob(Registration("j", SparseSpec(BSP, 2), 2), &r).ok());
  std::vector<std::string> want;
  for (uint64_t t = 0; t < 5; ++t) want.push_back(Step(reference, t, -1));

  for (uint64_t t = 0; t < 3; ++t) EXPECT_EQ(Step(*shards_[0], t, 0), want[t]);
  // Before the failover shard 1 holds the copy but does not serve it.
  std::unique_ptr<Call> early = Start(*shards_[1], 0, 3, 0);
  ASSERT_TRUE(early->done.WaitForNotificationWithTimeout(kWait));
  EXPECT_TRUE(absl::IsUnavailable(early->status)) << early->status;
  EXPECT_THAT(early->status.message(), HasSubstr("served by shard 0"));

  SetReplicaViewResponse resp;
  ASSERT_TRUE(shards_[1]->SetReplicaView(View(2, {0}), &resp).ok());
  // A resend of the last answered step is stale there; then it goes on.
  std::unique_ptr<Call> resend = Start(*shards_[1], 0, 2, 0);
  ASSERT_TRUE(resend->done.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(resend->status.ok()) << resend->status;
  EXPECT_TRUE(resend->resp.stale());
  for (uint64_t t = 3; t < 5; ++t) EXPECT_EQ(Step(*shards_[1], t, 0), want[t]);
}

TEST_F(ShardTablesReplicationTest, RequestsForCopiesNotHeldAreRefused) {
  std::unique_ptr<Call> none = Start(*shards_[0], 0, 0, 7);
  ASSERT_TRUE(none->done.WaitForNotificationWithTimeout(kWait));
  EXPECT_TRUE(absl::IsInvalidArgument(none->status)) << none->status;
  EXPECT_THAT(none->status.message(), HasSubstr("table_shard"));
  // An unreplicated job serves its own rows only.
  Shard plain(Options(0));
  RegisterJobResponse r;
  ASSERT_TRUE(
      plain.RegisterJob(Registration("j", SparseSpec(BSP, 2), 2), &r).ok());
  std::unique_ptr<Call> other = Start(plain, 0, 0, 1);
  ASSERT_TRUE(other->done.WaitForNotificationWithTimeout(kWait));
  EXPECT_TRUE(absl::IsInvalidArgument(other->status)) << other->status;
  // A table forward for a job without replicated tables.
  ReplicateRequest forward;
  forward.set_job_id("j");
  forward.set_epoch(0);
  forward.mutable_tables()->set_table_shard(0);
  EXPECT_TRUE(absl::IsInvalidArgument(plain.Replicate(forward)));
  // Nothing changed: its step 0 goes as usual.
  EXPECT_FALSE(Step(plain, 0, 0).empty());
}

}  // namespace
}  // namespace shard_test
}  // namespace ps
