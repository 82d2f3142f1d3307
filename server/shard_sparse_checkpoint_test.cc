// Checkpoints of a job's sparse tables through a Shard restart: rows,
// optimizer state, admission counters, version and a buffered BSP push come
// back bitwise; a damaged tables file falls back to the previous
// checkpoint; the BSP schedule waits for the chunks and the tables.
// Incremental ones: shard_sparse_increment_test.cc.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/checkpoint.h"
#include "server/shard.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace {

using shard_test::CheckpointDir;
using shard_test::CheckpointingShard;
using shard_test::CheckpointSpec;
using shard_test::CrashImage;
using shard_test::Registration;
using shard_test::StatsOf;
using ::testing::HasSubstr;

constexpr uint32_t kDim = 4;

// BSP, 2 workers, the dense tensors of shard_test::Spec and one Adagrad
// table whose rows are stored after their second push.
RegisterJobRequest SparseRegistration(uint32_t every_steps,
                                      uint32_t tables_full_every = 10) {
  JobSpec spec = CheckpointSpec(BSP, every_steps);
  spec.mutable_checkpoint()->set_tables_full_every(tables_full_every);
  TableSpec* t = spec.add_tables();
  t->set_name("emb");
  t->set_dim(kDim);
  t->mutable_init()->set_kind(UNIFORM);
  t->mutable_init()->set_scale(0.1f);
  t->mutable_optimizer()->set_kind(ADAGRAD);
  t->mutable_optimizer()->set_learning_rate(0.5f);
  t->set_admit_after(2);
  return Registration("j", spec);
}

struct Exchange {
  SparseExchangeRequest req;
  SparseExchangeResponse resp;
  absl::Status status;
  absl::Notification done;
};

std::string IdBytes(const std::vector<uint64_t>& ids) {
  return std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 8);
}

// Worker `w`'s ids at `step`: a shared hot set plus a few of its own, so
// that some ids stay below admission and others are summed over workers.
std::vector<uint64_t> IdsFor(uint32_t w, uint64_t step) {
  std::vector<uint64_t> ids = {7, 11, 1000003};
  for (uint64_t k = 0; k < 3; ++k) ids.push_back(100 * (w + 1) + step * 3 + k);
  return ids;
}

// Pushes worker `w`'s step `step` (gradients with distinct bits) and pulls
// `pull` (the pushed ids when empty). Starts the call; it may wait.
std::unique_ptr<Exchange> Start(Shard& shard, uint32_t w, uint64_t step,
                                bool push, std::vector<uint64_t> pull = {}) {
  auto x = std::make_unique<Exchange>();
  x->req.set_job_id("j");
  x->req.set_worker(w);
  x->req.set_step(step);
  x->req.set_push(push);
  const std::vector<uint64_t> ids = IdsFor(w, step);
  if (push) {
    SparseRows* g = x->req.add_gradients();
    g->set_table("emb");
    g->set_ids(IdBytes(ids));
    std::vector<float> grads(ids.size() * kDim);
    for (size_t i = 0; i < grads.size(); ++i) {
      grads[i] =
          0.01f * static_cast<float>((i * 7 + w * 13 + step) % 17) - 0.07f;
    }
    g->set_values(std::string(reinterpret_cast<const char*>(grads.data()),
                              grads.size() * 4));
  }
  SparseRows* p = x->req.add_pull();
  p->set_table("emb");
  p->set_ids(IdBytes(pull.empty() ? ids : pull));
  Exchange* raw = x.get();
  shard.SparseExchange(x->req, &x->resp, [raw](absl::Status s) {
    raw->status = std::move(s);
    raw->done.Notify();
  });
  return x;
}

void Finish(Exchange& x) {
  ASSERT_TRUE(x.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(x.status.ok()) << x.status;
}

// Both workers push `step`; both answers arrive.
void SparseStep(Shard& shard, uint64_t step) {
  auto a = Start(shard, 0, step, true);
  auto b = Start(shard, 1, step, true);
  Finish(*a);
  Finish(*b);
}

// Every id any step touches, pulled at `step` (no push): the rows' bytes.
std::string AllRows(Shard& shard, uint64_t step) {
  std::vector<uint64_t> all;
  for (uint32_t w = 0; w < 2; ++w) {
    for (uint64_t t = 0; t < 8; ++t) {
      for (uint64_t id : IdsFor(w, t)) all.push_back(id);
    }
  }
  auto x = Start(shard, 0, step, false, all);
  Finish(*x);
  return x->resp.rows_size() == 1 ? x->resp.rows(0).values() : "";
}

const TableStats& Table(const JobStats& s) { return s.tables(0); }

// Steps 0..2, worker 0's step-3 push buffered, a checkpoint, a crash: the
// restarted shard holds the same rows, counters, version and pending push,
// and goes on bitwise as a shard that never stopped.
TEST(ShardSparseCheckpointTest, RestartRestoresTablesExactly) {
  const RegisterJobRequest reg = SparseRegistration(1000);
  const std::string dir = CheckpointDir("sparse_round_trip");
  Shard reference(shard_test::Options(0));
  RegisterJobResponse resp;
  ASSERT_TRUE(reference.RegisterJob(reg, &resp).ok());
  std::string image, rows_then;
  JobStats stats_then;
  {
    Shard::RestoreReport report;
    std::unique_ptr<Shard> a = CheckpointingShard(dir, &report);
    ASSERT_TRUE(a->RegisterJob(reg, &resp).ok());
    for (Shard* s : {a.get(), &reference}) {
      for (uint64_t t = 0; t < 3; ++t) SparseStep(*s, t);
    }
    auto pending = Start(*a, 0, 3, true);
    auto pending_ref = Start(reference, 0, 3, true);
    EXPECT_FALSE(pending->done.HasBeenNotified());
    rows_then = AllRows(*a, 3);
    stats_then = StatsOf(*a, "j");
    ASSERT_TRUE(a->CheckpointNow("j").ok());
    image = CrashImage(dir, "sparse_round_trip_image");
    a->Shutdown();
    EXPECT_EQ(pending->status.code(), absl::StatusCode::kUnavailable);
    auto other_ref = Start(reference, 1, 3, true);
    Finish(*pending_ref);
    Finish(*other_ref);
  }
  ASSERT_EQ(Table(stats_then).rows(), 3u);  // the hot set: pushed twice
  ASSERT_GT(Table(stats_then).pending_admission(), 0u);

  Shard::RestoreReport report;
  std::unique_ptr<Shard> b = CheckpointingShard(image, &report);
  ASSERT_EQ(report.restored.size(), 1u) << report.problems[0];
  EXPECT_TRUE(report.problems.empty());
  const JobStats restored = StatsOf(*b, "j");
  EXPECT_EQ(restored.tables_version(), 3u);
  EXPECT_EQ(Table(restored).rows(), Table(stats_then).rows());
  EXPECT_EQ(Table(restored).pending_admission(),
            Table(stats_then).pending_admission());
  // (bytes_used may differ: the rebuilt index and counters are sized
  // afresh.)
  EXPECT_TRUE(AllRows(*b, 3) == rows_then);

  // Worker 0's step-3 push is in the checkpoint: its retry is a
  // duplicate, worker 1's completes the step once.
  auto retry = Start(*b, 0, 3, true);
  EXPECT_FALSE(retry->done.HasBeenNotified());
  auto other = Start(*b, 1, 3, true);
  Finish(*retry);
  Finish(*other);
  EXPECT_TRUE(retry->resp.duplicate());
  for (Shard* s : {b.get(), &reference}) {
    for (uint64_t t = 4; t < 6; ++t) SparseStep(*s, t);
  }
  EXPECT_TRUE(AllRows(*b, 6) == AllRows(reference, 6));
  EXPECT_EQ(Table(StatsOf(*b, "j")).rows(),
            Table(StatsOf(reference, "j")).rows());

  // A push beyond the restored version fails naming the restore.
  std::unique_ptr<Shard> c = CheckpointingShard(image, &report);
  auto ahead = Start(*c, 0, 5, true);
  ASSERT_TRUE(ahead->done.HasBeenNotified());
  EXPECT_THAT(std::string(ahead->status.message()),
              HasSubstr("restored the tables from their checkpoint of step 3"));
}

enum class Damage { kFlipByte, kTruncate, kDelete };

// The newest tables file damaged: the previous checkpoint (registration,
// version 0) is used and the damaged file named.
class DamagedTablesTest : public ::testing::TestWithParam<Damage> {};

TEST_P(DamagedTablesTest, FallsBackToThePreviousCheckpoint) {
  const RegisterJobRequest reg = SparseRegistration(1000);
  const std::string dir = CheckpointDir(
      absl::StrCat("sparse_damaged_", static_cast<int>(GetParam())));
  std::string rows_at_zero;
  {
    Shard::RestoreReport report;
    std::unique_ptr<Shard> a = CheckpointingShard(dir, &report);
    RegisterJobResponse resp;
    ASSERT_TRUE(a->RegisterJob(reg, &resp).ok());
    rows_at_zero = AllRows(*a, 0);
    for (uint64_t t = 0; t < 2; ++t) SparseStep(*a, t);
    ASSERT_TRUE(a->CheckpointNow("j").ok());
  }  // nothing changed since: no last checkpoint
  absl::StatusOr<std::unique_ptr<CheckpointStore>> store =
      CheckpointStore::Open(dir, 0);
  ASSERT_TRUE(store.ok());
  const std::string tables = (*store)->TablesPathFor("j", 2);
  const uint64_t size = std::filesystem::file_size(tables);
  ASSERT_GT(size, 100u);
  switch (GetParam()) {
    case Damage::kFlipByte: {
      std::fstream f(tables, std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(size - 40);
      const char c = static_cast<char>(f.get());
      f.seekp(size - 40);
      f.put(static_cast<char>(c ^ 0x10));
      break;
    }
    case Damage::kTruncate:
      std::filesystem::resize_file(tables, size - 7);
      break;
    case Damage::kDelete:
      std::filesystem::remove(tables);
      break;
  }
  Shard::RestoreReport report;
  std::unique_ptr<Shard> b = CheckpointingShard(dir, &report);
  ASSERT_EQ(report.restored.size(), 1u);
  EXPECT_THAT(report.restored[0], HasSubstr((*store)->PathFor("j", 1)));
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_THAT(report.problems[0], HasSubstr(tables));
  EXPECT_THAT(report.problems[0], HasSubstr("using the previous checkpoint"));
  EXPECT_EQ(StatsOf(*b, "j").tables_version(), 0u);
  EXPECT_TRUE(AllRows(*b, 0) == rows_at_zero);
}

INSTANTIATE_TEST_SUITE_P(Damages, DamagedTablesTest,
                         ::testing::Values(Damage::kFlipByte, Damage::kTruncate,
                                           Damage::kDelete));

// BSP every_steps 2: a checkpoint is due once the chunks AND the tables
// reached step 2; dense steps alone do not make it due.
TEST(ShardSparseCheckpointTest, BspScheduleWaitsForChunksAndTables) {
  const RegisterJobRequest reg = SparseRegistration(2);
  Shard::RestoreReport report;
  std::unique_ptr<Shard> a =
      CheckpointingShard(CheckpointDir("sparse_schedule"), &report);
  RegisterJobResponse resp;
  ASSERT_TRUE(a->RegisterJob(reg, &resp).ok());
  for (uint64_t t = 0; t < 2; ++t) shard_test::BspStep(*a, reg, t);
  a->FlushCheckpoints();
  EXPECT_EQ(StatsOf(*a, "j").checkpoints(), 1u);  // registration only
  SparseStep(*a, 0);
  a->FlushCheckpoints();
  EXPECT_EQ(StatsOf(*a, "j").checkpoints(), 1u);
  SparseStep(*a, 1);
  a->FlushCheckpoints();
  EXPECT_EQ(StatsOf(*a, "j").checkpoints(), 2u);
  // Tables ahead now: the next one waits for the chunks.
  for (uint64_t t = 2; t < 4; ++t) SparseStep(*a, t);
  a->FlushCheckpoints();
  EXPECT_EQ(StatsOf(*a, "j").checkpoints(), 2u);
  for (uint64_t t = 2; t < 4; ++t) shard_test::BspStep(*a, reg, t);
  a->FlushCheckpoints();
  EXPECT_EQ(StatsOf(*a, "j").checkpoints(), 3u);
}

// Only the newest kCheckpointsKept pairs stay (every one full); a tables
// file without its .ckpt (a crash between the two renames) is ignored and
// then deleted.
TEST(ShardSparseCheckpointTest, OldAndOrphanTablesFilesAreDeleted) {
  const RegisterJobRequest reg = SparseRegistration(1000, 1);
  const std::string dir = CheckpointDir("sparse_orphans");
  Shard::RestoreReport report;
  std::unique_ptr<Shard> a = CheckpointingShard(dir, &report);
  RegisterJobResponse resp;
  ASSERT_TRUE(a->RegisterJob(reg, &resp).ok());
  absl::StatusOr<std::unique_ptr<CheckpointStore>> store =
      CheckpointStore::Open(dir, 0);
  ASSERT_TRUE(store.ok());
  // An orphan of sequence 9, as a crash before its .ckpt would leave.
  std::filesystem::copy_file((*store)->TablesPathFor("j", 1),
                             (*store)->TablesPathFor("j", 9));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(a->CheckpointNow("j").ok());
  for (uint64_t seq = 1; seq <= 4; ++seq) {
    const bool kept = seq >= 3;
    EXPECT_EQ(std::filesystem::exists((*store)->PathFor("j", seq)), kept);
    EXPECT_EQ(std::filesystem::exists((*store)->TablesPathFor("j", seq)), kept)
        << seq;
  }
  EXPECT_FALSE(std::filesystem::exists((*store)->TablesPathFor("j", 9)));
  DropJobRequest drop;
  drop.set_job_id("j");
  ASSERT_TRUE(a->DropJob(drop).ok());
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

// The format of a tables file's header: 1 full, 2 an increment.
uint64_t TablesFormat(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char h[12] = {};
  f.read(h, sizeof(h));
  return static_cast<uint8_t>(h[8]);
}

// tables_full_every 3: the registration's checkpoint full, then two
// increments, a full one, ... A crash after an increment restores the
// chain exactly; a torn increment falls back to the checkpoint before it,
// a torn full one to the chain before it (kept for that); then old chains
// go.
TEST(ShardSparseCheckpointTest, IncrementsRestoreExactlyAndFallBack) {
  const RegisterJobRequest reg = SparseRegistration(1000, 3);
  const std::string dir = CheckpointDir("sparse_increments");
  Shard reference(shard_test::Options(0));
  RegisterJobResponse resp;
  ASSERT_TRUE(reference.RegisterJob(reg, &resp).ok());
  Shard::RestoreReport report;
  std::unique_ptr<Shard> a = CheckpointingShard(dir, &report);
  ASSERT_TRUE(a->RegisterJob(reg, &resp).ok());  // checkpoint 1
  std::vector<std::string> rows_at(7);
  rows_at[1] = AllRows(*a, 0);
  for (uint64_t t = 0; t < 5; ++t) {
    SparseStep(*a, t);
    SparseStep(reference, t);
    ASSERT_TRUE(a->CheckpointNow("j").ok());  // checkpoint t + 2
    rows_at[t + 2] = AllRows(*a, t + 1);
  }
  absl::StatusOr<std::unique_ptr<CheckpointStore>> store =
      CheckpointStore::Open(dir, 0);
  ASSERT_TRUE(store.ok());
  for (uint64_t seq = 1; seq <= 6; ++seq) {
    // Kept: 5 and 6, their base 4, and 3 with its chain (the fallback
    // should 4's file be torn).
    ASSERT_TRUE(std::filesystem::exists((*store)->PathFor("j", seq))) << seq;
    EXPECT_EQ(TablesFormat((*store)->TablesPathFor("j", seq)),
              seq % 3 == 1 ? 1u : 2u)
        << seq;
  }
  const std::string image = CrashImage(dir, "sparse_increments_image");
  struct Case {
    uint64_t torn;      // the tables file damaged
    uint64_t restored;  // the checkpoint restored instead
  };
  const std::vector<Case> cases = {{5, 4}, {4, 3}};
  std::vector<std::string> copies;
  for (const Case& c : cases) {
    copies.push_back(
        CrashImage(dir, absl::StrCat("sparse_increments_torn_", c.torn)));
  }
  {
    std::unique_ptr<Shard> b = CheckpointingShard(image, &report);
    ASSERT_EQ(report.restored.size(), 1u) << report.problems[0];
    EXPECT_TRUE(report.problems.empty());
    EXPECT_EQ(StatsOf(*b, "j").tables_version(), 5u);
    EXPECT_TRUE(AllRows(*b, 5) == rows_at[6]);
    for (uint64_t t = 5; t < 7; ++t) {
      SparseStep(*b, t);
      SparseStep(reference, t);
    }
    EXPECT_TRUE(AllRows(*b, 7) == AllRows(reference, 7));
  }
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    const std::string& copy = copies[k];
    absl::StatusOr<std::unique_ptr<CheckpointStore>> s =
        CheckpointStore::Open(copy, 0);
    ASSERT_TRUE(s.ok());
    const std::string torn = (*s)->TablesPathFor("j", c.torn);
    const uint64_t size = std::filesystem::file_size(torn);
    std::filesystem::resize_file(torn, size - 5);
    std::unique_ptr<Shard> b = CheckpointingShard(copy, &report);
    ASSERT_EQ(report.restored.size(), 1u) << c.torn;
    EXPECT_THAT(report.restored[0], HasSubstr((*s)->PathFor("j", c.restored)));
    ASSERT_FALSE(report.problems.empty());
    EXPECT_THAT(report.problems[0], HasSubstr(torn));
    EXPECT_THAT(report.problems.back(),
                HasSubstr("using the previous checkpoint"));
    EXPECT_EQ(StatsOf(*b, "j").tables_version(), c.restored - 1);
    EXPECT_TRUE(AllRows(*b, c.restored - 1) == rows_at[c.restored]);
  }
  // Checkpoint 7 is full: the chain before 4 is no longer needed.
  SparseStep(*a, 5);
  ASSERT_TRUE(a->CheckpointNow("j").ok());
  for (uint64_t seq = 1; seq <= 7; ++seq) {
    EXPECT_EQ(std::filesystem::exists((*store)->PathFor("j", seq)), seq >= 4)
        << seq;
    EXPECT_EQ(std::filesystem::exists((*store)->TablesPathFor("j", seq)),
              seq >= 4)
        << seq;
  }
  EXPECT_EQ(TablesFormat((*store)->TablesPathFor("j", 7)), 1u);
}

TEST(ShardSparseCheckpointTest, TablesFullEveryIsValidated) {
  Shard shard(shard_test::Options(0));
  RegisterJobResponse resp;
  const absl::Status st =
      shard.RegisterJob(SparseRegistration(1000, 101), &resp);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("checkpoint.tables_full_every: must be at most 100"));
  EXPECT_TRUE(shard.RegisterJob(SparseRegistration(1000, 100), &resp).ok());
}

}  // namespace
}  // namespace ps
