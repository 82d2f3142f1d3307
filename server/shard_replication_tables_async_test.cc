// Shard tests, a replicated ASP or SSP job's sparse tables (JobSpec.
// replication = 2) on two in-process shards whose forwards call each other
// directly: the rows of shard 0 are backed up on shard 1. Pushes of two
// workers, applied on shard 0 one at a time, reach the backup in the same
// order (its rows bitwise the primary's); a push is answered only once the
// backup holds it, or once the backup, reported lagging, is failed over; after
// a failover a resend of an answered (worker, step) is a duplicate, applied
// once; a bad forward is refused with nothing changed.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace shard_test {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(30);

struct Call {
  SparseExchangeRequest req;
  SparseExchangeResponse resp;
  absl::Status status;
  absl::Notification done;
};

std::string IdBytes(const std::vector<uint64_t>& ids) {
  return std::string(reinterpret_cast<const char*>(ids.data()),
                     ids.size() * sizeof(uint64_t));
}

// Worker `w`'s push of `step` on shard 0's rows (overlapping the other
// worker's: rows 0..3 both, then 2 of its own), pulling rows 0..3 too.
std::unique_ptr<Call> Start(Shard& shard, uint32_t w, uint64_t step,
                            bool push = true) {
  auto c = std::make_unique<Call>();
  const std::vector<uint64_t> all = IdsOfShard(0, 2, 8);
  std::vector<uint64_t> ids(all.begin(), all.begin() + 4);
  ids.push_back(all[4 + 2 * w]);
  ids.push_back(all[5 + 2 * w]);
  c->req.set_job_id("j");
  c->req.set_worker(w);
  c->req.set_step(step);
  c->req.set_push(push);
  c->req.set_table_shard(0);
  if (push) {
    std::vector<float> g(ids.size() * 4);
    for (size_t i = 0; i < g.size(); ++i) {
      // Magnitudes over decades: another order of the pushes changes bits.
      g[i] = std::pow(10.0f, static_cast<float>((i + w) % 5) - 2.0f) *
             (0.3f * static_cast<float>(w + 1) + 0.017f * (step * 5 + i));
    }
    SparseRows* rows = c->req.add_gradients();
    rows->set_table("emb");
    rows->set_ids(IdBytes(ids));
    rows->set_values(
        std::string(reinterpret_cast<const char*>(g.data()), g.size() * 4));
  }
  SparseRows* pull = c->req.add_pull();
  pull->set_table("emb");
  pull->set_ids(IdBytes(all));
  Call* raw = c.get();
  shard.SparseExchange(raw->req, &raw->resp, [raw](absl::Status s) {
    raw->status = s;
    raw->done.Notify();
  });
  return c;
}

// What the shard serving shard 0's rows holds: its version and the rows.
struct Rows {
  uint64_t version = 0;
  std::string values;
};

Rows Read(Shard& shard) {
  std::unique_ptr<Call> c = Start(shard, 0, 0, /*push=*/false);
  EXPECT_TRUE(c->done.WaitForNotificationWithTimeout(kWait));
  EXPECT_TRUE(c->status.ok()) << c->status;
  Rows r;
  r.version = c->resp.version();
  if (c->resp.rows_size() == 1) r.values = c->resp.rows(0).values();
  return r;
}

void AwaitOk(Call& c) {
  ASSERT_TRUE(c.done.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(c.status.ok()) << c.status;
}

class ShardTablesAsyncReplicationTest
    : public ::testing::TestWithParam<ConsistencyMode> {
 protected:
  void SetUp() override {
    JobSpec spec = SparseSpec(GetParam(), 2);
    if (GetParam() == SSP) spec.mutable_consistency()->set_staleness(2);
    const RegisterJobRequest reg = ReplicatedOnTwo("j", spec);
    for (uint32_t s = 0; s < 2; ++s) {
      ShardOptions o = Options(s);
      o.replicate_retry = absl::Milliseconds(5);
      shards_.push_back(std::make_unique<Shard>(o));
      shards_[s]->SetReplicaSender([this](const std::string& address,
                                          const ReplicateRequest& req,
                                          absl::Time) {
        {
          absl::MutexLock l(&mu_);
          if (dead_) return absl::UnavailableError("the backup is down");
        }
        return shards_[address == "s0" ? 0 : 1]->Replicate(req);
      });
      SetReplicaViewResponse resp;
      ASSERT_TRUE(shards_[s]->SetReplicaView(View(1, {}), &resp).ok());
      RegisterJobResponse r;
      ASSERT_TRUE(shards_[s]->RegisterJob(reg, &r).ok());
    }
  }
  void TearDown() override {
    SetDead(false);
    shards_[0].reset();  // its forwards call shard 1
    shards_[1].reset();
  }

  void SetDead(bool dead) {
    absl::MutexLock l(&mu_);
    dead_ = dead;
  }

  // Both workers push steps [from, to), each on its own thread (so their
  // pushes apply concurrently), each step after its own previous one was
  // answered (as workers do).
  void Train(Shard& shard, uint64_t from, uint64_t to) {
    auto worker = [&shard, from, to](uint32_t w) {
      for (uint64_t t = from; t < to; ++t) {
        std::unique_ptr<Call> c = Start(shard, w, t);
        AwaitOk(*c);
        EXPECT_FALSE(c->resp.duplicate()) << w << " " << t;
      }
    };
    std::thread second(worker, 1);
    worker(0);
    second.join();
  }

  // Shard 1 serves shard 0's rows from now on.
  void FailOver() {
    SetReplicaViewResponse resp;
    ASSERT_TRUE(shards_[1]->SetReplicaView(View(2, {0}), &resp).ok());
  }

  absl::Mutex mu_;
  bool dead_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<Shard>> shards_;
};

INSTANTIATE_TEST_SUITE_P(
    Modes, ShardTablesAsyncReplicationTest, ::testing::Values(ASP, SSP),
    [](const ::testing::TestParamInfo<ConsistencyMode>& info) {
      return ConsistencyMode_Name(info.param);
    });

TEST_P(ShardTablesAsyncReplicationTest, TheBackupHoldsThePrimarysRowsBitwise) {
  Train(*shards_[0], 0, 6);
  const Rows primary = Read(*shards_[0]);
  EXPECT_EQ(primary.version, 12u);  // each push a version
  FailOver();
  const Rows backup = Read(*shards_[1]);
  EXPECT_EQ(backup.version, primary.version);
  EXPECT_EQ(backup.values, primary.values);
  // A resend of an answered (worker, step) is a duplicate there, applied
  // once; the next steps go on.
  std::unique_ptr<Call> resend = Start(*shards_[1], 1, 5);
  AwaitOk(*resend);
  EXPECT_TRUE(resend->resp.duplicate());
  EXPECT_EQ(Read(*shards_[1]).values, primary.values);
  Train(*shards_[1], 6, 8);
  EXPECT_EQ(Read(*shards_[1]).version, 16u);
}

TEST_P(ShardTablesAsyncReplicationTest, ADeadBackupBlocksUntilFailedOver) {
  Train(*shards_[0], 0, 2);
  SetDead(true);
  std::unique_ptr<Call> held = Start(*shards_[0], 0, 2);
  // Applied, not answered: the backup does not hold it. The heartbeat's
  // answer names it lagging (what the coordinator fails over).
  SetReplicaViewRequest beat = View(1, {});
  beat.set_lag_ms(1);
  SetReplicaViewResponse resp;
  const absl::Time give_up = absl::Now() + kWait;
  while (resp.lagging().empty() && absl::Now() < give_up) {
    resp.Clear();
    ASSERT_TRUE(shards_[0]->SetReplicaView(beat, &resp).ok());
    absl::SleepFor(absl::Milliseconds(1));  // a poll, not a synchronization
  }
  EXPECT_THAT(resp.lagging(), ::testing::ElementsAre(1u));
  EXPECT_FALSE(held->done.HasBeenNotified());
  // The coordinator fails the backup over: it no longer counts.
  resp.Clear();
  ASSERT_TRUE(shards_[0]->SetReplicaView(View(2, {1}), &resp).ok());
  AwaitOk(*held);
  EXPECT_FALSE(held->resp.duplicate());
  EXPECT_EQ(held->resp.version(), 5u);
  // Later pushes do not wait for it either.
  std::unique_ptr<Call> next = Start(*shards_[0], 1, 2);
  AwaitOk(*next);
}

TEST_P(ShardTablesAsyncReplicationTest, ABadForwardChangesNothing) {
  Train(*shards_[0], 0, 3);
  const Rows primary = Read(*shards_[0]);
  const std::vector<uint64_t> own = IdsOfShard(0, 2, 1);
  const std::vector<uint64_t> foreign = IdsOfShard(1, 2, 1);
  auto forward = [&](uint32_t worker, uint64_t version_before,
                     const std::vector<uint64_t>& ids, float value) {
    ReplicateRequest req;
    req.set_job_id("j");
    req.set_epoch(1);
    req.set_from_shard(0);
    ReplicaTables* t = req.mutable_tables();
    t->set_table_shard(0);
    ReplicaTableStep* step = t->add_steps();
    step->set_version_before(version_before);
    step->set_scale(1.0f);
    step->set_worker(worker);
    step->set_step(3);
    SparseRows* rows = step->add_rows();
    rows->set_table("emb");
    rows->set_ids(IdBytes(ids));
    const std::vector<float> g(4 * ids.size(), value);
    rows->set_values(
        std::string(reinterpret_cast<const char*>(g.data()), g.size() * 4));
    return shards_[1]->Replicate(req);
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  absl::Status s = forward(7, 6, own, 1.0f);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("steps.worker"));
  s = forward(0, 6, foreign, 1.0f);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(".ids"));
  s = forward(0, 6, own, nan);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(".values"));
  // A base the copy lacks: the primary is to send the state.
  s = forward(0, 9, own, 1.0f);
  EXPECT_TRUE(absl::IsOutOfRange(s)) << s;
  // Not from the acting primary.
  ReplicateRequest from_self;
  from_self.set_job_id("j");
  from_self.set_epoch(1);
  from_self.set_from_shard(1);
  from_self.mutable_tables()->set_table_shard(0);
  EXPECT_TRUE(absl::IsFailedPrecondition(shards_[1]->Replicate(from_self)));

  FailOver();
  const Rows backup = Read(*shards_[1]);
  EXPECT_EQ(backup.version, primary.version);
  EXPECT_EQ(backup.values, primary.values);
  // Worker 0's step 3 was not taken from the bad forwards: it applies.
  std::unique_ptr<Call> next = Start(*shards_[1], 0, 3);
  AwaitOk(*next);
  EXPECT_FALSE(next->resp.duplicate());
  EXPECT_EQ(next->resp.version(), primary.version + 1);
}

}  // namespace
}  // namespace shard_test
}  // namespace ps
