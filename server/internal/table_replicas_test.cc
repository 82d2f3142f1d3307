#include "server/internal/table_replicas.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/text_proto.h"
#include "core/sparse_ids.h"
#include "core/table_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/sparse/byte_stream.h"

namespace ps {
namespace internal {
namespace {

using ::testing::HasSubstr;

constexpr uint32_t kShards = 2;
constexpr uint32_t kWorkers = 2;

JobSpec Spec() {
  JobSpec spec;
  const std::string text =
      "name: \"j\" seed: 7 consistency { mode: BSP step_deadline_ms: 5000 } "
      "tables { name: \"emb\" dim: 2 init { kind: CONSTANT value: 1 } "
      "optimizer { kind: ADAGRAD learning_rate: 0.5 } }";
  EXPECT_TRUE(ParseTextProto(text, "job", &spec).ok());
  for (TableSpec& t : *spec.mutable_tables()) ApplyTableDefaults(&t);
  return spec;
}

std::unique_ptr<JobTables> Tables(uint32_t shard) {
  absl::StatusOr<std::unique_ptr<JobTables>> t = JobTables::Create(
      Spec(),
      {.shard_id = shard, .num_shards = kShards, .num_workers = kWorkers});
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

// The first `n` ids of shard `shard`.
std::vector<uint64_t> IdsOf(uint32_t shard, int n) {
  std::vector<uint64_t> ids;
  for (uint64_t id = 0; static_cast<int>(ids.size()) < n; ++id) {
    if (ShardForId(id, kShards) == shard) ids.push_back(id);
  }
  return ids;
}

std::string Bytes(const void* p, size_t n) {
  return std::string(static_cast<const char*>(p), n);
}

std::string Rows(const JobTables& t) {
  std::string out;
  StringSink sink(&out);
  EXPECT_TRUE(t.SaveTable("emb", sink).ok());
  return out;
}

SetReplicaViewRequest View(uint64_t epoch, std::vector<uint32_t> failed) {
  SetReplicaViewRequest v;
  v.set_epoch(epoch);
  for (uint32_t s = 0; s < kShards; ++s) v.add_addresses(absl::StrCat(s));
  for (uint32_t f : failed) v.add_failed(f);
  return v;
}

// One exchange in flight.
struct Pending {
  absl::Notification done;
  absl::Status status;
  SparseExchangeRequest req;
  SparseExchangeResponse resp;
};

// Starts step `step` of worker `w` on `t`: a push to shard 0's rows of a
// gradient that depends on (w, step).
std::shared_ptr<Pending> Start(JobTables& t, uint32_t w, uint64_t step) {
  const std::vector<uint64_t> ids = IdsOf(0, 3);
  std::vector<float> grads;
  for (size_t i = 0; i < ids.size() * 2; ++i) {
    grads.push_back(0.1f * static_cast<float>(w + 1) +
                    0.01f * static_cast<float>(step * 7 + i));
  }
  auto p = std::make_shared<Pending>();
  p->req.set_job_id("j");
  p->req.set_worker(w);
  p->req.set_step(step);
  p->req.set_push(true);
  SparseRows* g = p->req.add_gradients();
  g->set_table("emb");
  g->set_ids(Bytes(ids.data(), ids.size() * 8));
  g->set_values(Bytes(grads.data(), grads.size() * 4));
  t.Exchange(p->req, &p->resp, [p](absl::Status s) {
    p->status = s;
    p->done.Notify();
  });
  return p;
}

absl::Status Wait(const std::shared_ptr<Pending>& p) {
  p->done.WaitForNotification();
  return p->status;
}

// Both workers' step `step` on `t`, answered.
void BothWorkers(JobTables& t, uint64_t step) {
  std::shared_ptr<Pending> first = Start(t, 0, step);
  std::shared_ptr<Pending> second = Start(t, 1, step);
  ASSERT_TRUE(Wait(first).ok()) << first->status;
  ASSERT_TRUE(Wait(second).ok()) << second->status;
}

// Two shards, k = 2: each holds its rows and a copy of the other's. The
// forwards go straight to the other's Apply (after `hold`, if set).
class TableReplicasTest : public ::testing::Test {
 protected:
  virtual size_t PieceBytes() const { return size_t{1} << 20; }

  void SetUp() override {
    Placement placement;
    placement.set_num_shards(kShards);
    for (uint32_t s = 0; s < kShards; ++s) {
      views_[s] = std::make_shared<ReplicaView>(s);
      ASSERT_TRUE(views_[s]->Set(View(1, {})).ok());
      own_[s] = Tables(s);
      absl::StatusOr<std::unique_ptr<TableReplicas>> r = TableReplicas::Create(
          {.retry = absl::Milliseconds(5), .piece_bytes = PieceBytes()}, "j",
          placement, 2, views_[s], own_[s].get(),
          [](uint32_t shard) { return Tables(shard); });
      ASSERT_TRUE(r.ok()) << r.status();
      replicas_[s] = *std::move(r);
    }
    for (uint32_t s = 0; s < kShards; ++s) {
      replicas_[s]->SetSender([this](const std::string& address,
                                     const ReplicateRequest& req, absl::Time) {
        {
          absl::MutexLock l(&mu_);
          ++forwards_;
          if (refuse_) return absl::UnavailableError("the test's backup");
        }
        if (hold_ != nullptr) hold_->WaitForNotification();
        return replicas_[std::stoi(address)]->Apply(req);
      });
    }
  }

  absl::Mutex mu_;
  int forwards_ ABSL_GUARDED_BY(mu_) = 0;
  bool refuse_ ABSL_GUARDED_BY(mu_) = false;
  absl::Notification* hold_ = nullptr;
  std::shared_ptr<ReplicaView> views_[kShards];
  std::unique_ptr<JobTables> own_[kShards];
  std::unique_ptr<TableReplicas> replicas_[kShards];
};

TEST_F(TableReplicasTest, AStepIsAnsweredOnlyOnceItsBackupHoldsIt) {
  absl::Notification hold;
  hold_ = &hold;
  std::shared_ptr<Pending> first = Start(*own_[0], 0, 0);
  std::shared_ptr<Pending> second = Start(*own_[0], 1, 0);
  // Applied, but the forward to shard 1 is held: no answer yet.
  EXPECT_EQ(own_[0]->version(), 1u);
  EXPECT_FALSE(
      second->done.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  hold.Notify();
  ASSERT_TRUE(Wait(first).ok()) << first->status;
  ASSERT_TRUE(Wait(second).ok()) << second->status;
  // Failing shard 0 over: shard 1 serves its copy, bitwise the primary's.
  ASSERT_TRUE(views_[1]->Set(View(2, {0})).ok());
  absl::StatusOr<JobTables*> copy = replicas_[1]->Serving(0);
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ((*copy)->version(), 1u);
  EXPECT_EQ(Rows(**copy), Rows(*own_[0]));
}

TEST_F(TableReplicasTest, AFailedOverCopyGoesOnBitwiseAsAnUnreplicatedRun) {
  std::unique_ptr<JobTables> reference = Tables(0);
  for (uint64_t step = 0; step < 6; ++step) BothWorkers(*reference, step);
  // Steps 0-2 on shard 0 (its answers wait for shard 1), then shard 0 is
  // failed over and shard 1 serves steps 3-5 from its copy.
  for (uint64_t step = 0; step < 3; ++step) BothWorkers(*own_[0], step);
  EXPECT_TRUE(replicas_[0]->Serving(0).ok());
  EXPECT_EQ(replicas_[1]->Serving(0).status().code(),
            absl::StatusCode::kUnavailable);
  ASSERT_TRUE(views_[1]->Set(View(2, {0})).ok());
  replicas_[1]->Wake();
  absl::StatusOr<JobTables*> copy = replicas_[1]->Serving(0);
  ASSERT_TRUE(copy.ok()) << copy.status();
  ASSERT_EQ((*copy)->version(), 3u);
  // A resend of the last answered step is stale there, not applied twice.
  std::shared_ptr<Pending> resend = Start(**copy, 0, 2);
  ASSERT_TRUE(Wait(resend).ok()) << resend->status;
  EXPECT_TRUE(resend->resp.stale());
  for (uint64_t step = 3; step < 6; ++step) BothWorkers(**copy, step);
  EXPECT_EQ((*copy)->version(), 6u);
  EXPECT_EQ(Rows(**copy), Rows(*reference));
}

TEST_F(TableReplicasTest, ABackupThatRefusesForwardsIsReportedLagging) {
  {
    absl::MutexLock l(&mu_);
    refuse_ = true;
  }
  std::shared_ptr<Pending> first = Start(*own_[0], 0, 0);
  std::shared_ptr<Pending> second = Start(*own_[0], 1, 0);
  {
    // Two tries failed: the first is recorded.
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(
        +[](int* n) { return *n >= 2; }, &forwards_));
  }
  EXPECT_THAT(replicas_[0]->Lagging(absl::ZeroDuration(), absl::Now()),
              ::testing::ElementsAre(1u));
  EXPECT_THAT(replicas_[0]->Lagging(absl::Hours(1), absl::Now()),
              ::testing::IsEmpty());
  EXPECT_FALSE(second->done.HasBeenNotified());  // held for the backup
  {
    absl::MutexLock l(&mu_);
    refuse_ = false;
  }
  ASSERT_TRUE(Wait(first).ok()) << first->status;
  ASSERT_TRUE(Wait(second).ok()) << second->status;
  EXPECT_THAT(replicas_[0]->Lagging(absl::ZeroDuration(), absl::Now()),
              ::testing::IsEmpty());
}

// Pieces of 40 bytes: every state and every step (about 100 bytes) goes
// in pieces, reassembled by the backup.
class TableReplicasInPiecesTest : public TableReplicasTest {
 protected:
  size_t PieceBytes() const override { return 40; }
};

TEST_F(TableReplicasInPiecesTest, StatesAndStepsOverTheBoundGoInPieces) {
  std::unique_ptr<JobTables> reference = Tables(0);
  for (uint64_t step = 0; step < 4; ++step) {
    BothWorkers(*reference, step);
    BothWorkers(*own_[0], step);
  }
  ASSERT_TRUE(views_[1]->Set(View(2, {0})).ok());
  absl::StatusOr<JobTables*> copy = replicas_[1]->Serving(0);
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ((*copy)->version(), 4u);
  EXPECT_EQ(Rows(**copy), Rows(*reference));
  absl::MutexLock l(&mu_);
  EXPECT_GT(forwards_, 8);  // more pieces than forwards
}

TEST_F(TableReplicasTest, BadForwardsAreRefusedAndChangeNothing) {
  for (uint64_t step = 0; step < 2; ++step) BothWorkers(*own_[0], step);
  ASSERT_TRUE(views_[1]->Set(View(2, {0})).ok());
  JobTables* copy = *replicas_[1]->Serving(0);
  const std::string before = Rows(*copy);
  ASSERT_TRUE(views_[1]->Set(View(3, {})).ok());  // shard 0 serves again
  auto forward = [](uint32_t from, uint32_t table_shard) {
    ReplicateRequest req;
    req.set_job_id("j");
    req.set_from_shard(from);
    req.mutable_tables()->set_table_shard(table_shard);
    return req;
  };
  EXPECT_EQ(replicas_[1]->Apply(forward(1, 0)).code(),
            absl::StatusCode::kFailedPrecondition);  // not its primary
  EXPECT_EQ(replicas_[1]->Apply(forward(0, 7)).code(),
            absl::StatusCode::kInvalidArgument);  // no such copy
  ReplicateRequest wrong_id = forward(0, 0);
  ReplicaTableStep* step = wrong_id.mutable_tables()->add_steps();
  step->set_version_before(2);
  step->set_scale(1);
  SparseRows* rows = step->add_rows();
  rows->set_table("emb");
  const uint64_t other = IdsOf(1, 1)[0];
  const float g[2] = {1, 1};
  rows->set_ids(Bytes(&other, 8));
  rows->set_values(Bytes(g, 8));
  EXPECT_THAT(replicas_[1]->Apply(wrong_id).message(),
              HasSubstr("is not a row of shard 0"));
  rows->set_values(Bytes(g, 4));
  EXPECT_EQ(replicas_[1]->Apply(wrong_id).code(),
            absl::StatusCode::kInvalidArgument);  // half a row
  rows->set_table("nope");
  EXPECT_EQ(replicas_[1]->Apply(wrong_id).code(),
            absl::StatusCode::kInvalidArgument);
  ReplicateRequest ahead = forward(0, 0);
  ahead.mutable_tables()->add_steps()->set_version_before(9);
  EXPECT_EQ(replicas_[1]->Apply(ahead).code(), absl::StatusCode::kOutOfRange);
  ReplicateRequest gap = forward(0, 0);
  gap.mutable_tables()->set_has_snapshot(true);
  gap.mutable_tables()->set_offset(5);
  gap.mutable_tables()->set_snapshot_bytes(10);
  gap.mutable_tables()->set_snapshot("abc");
  EXPECT_EQ(replicas_[1]->Apply(gap).code(),
            absl::StatusCode::kInvalidArgument);
  ReplicateRequest garbage = gap;
  garbage.mutable_tables()->set_offset(0);
  garbage.mutable_tables()->set_snapshot_bytes(3);
  EXPECT_FALSE(replicas_[1]->Apply(garbage).ok());
  EXPECT_EQ(copy->version(), 2u);
  EXPECT_EQ(Rows(*copy), before);
}

TEST(TablesCopyPlacementTest, FollowsTheShardsFirstChunkElseTheNextShards) {
  Placement p;
  p.set_num_shards(3);
  ChunkPlacement* c = p.add_chunks();
  c->set_shard(1);
  c->add_backups(0);
  EXPECT_THAT(TablesCopyPlacement(p, 1, 2).backups(),
              ::testing::ElementsAre(0u));
  EXPECT_THAT(TablesCopyPlacement(p, 2, 2).backups(),
              ::testing::ElementsAre(0u));
  EXPECT_THAT(TablesCopyPlacement(p, 0, 3).backups(),
              ::testing::ElementsAre(1u, 2u));
}

}  // namespace
}  // namespace internal
}  // namespace ps
