// Shard tests, live re-placement of a job's sparse rows between in-process
// shards (server/internal/reshard_tables.h): rows on shards [0, 1] move to
// [0, 1, 2] and train on bitwise as rows that never moved; an aborted move
// leaves them as they were; a fetch of rows with bad fields is refused
// naming the field, nothing changed; after the commit the old placement
// epoch and ids of another shard are refused.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "core/sparse_ids.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "server/testing/reshard_fixture.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace shard_test {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kIds = 1000;  // SparseSpec's num_ids; dim 4

// The job on 3 shards, its rows on shards 0 and 1.
RegisterJobRequest TwoOwners() {
  RegisterJobRequest reg = Registration("j", SparseSpec(BSP, 1), 3);
  reg.mutable_placement()->add_table_shards(0);
  reg.mutable_placement()->add_table_shards(1);
  return reg;
}

std::vector<uint32_t> Owners(const Placement& p) {
  return {p.table_shards().begin(), p.table_shards().end()};
}

std::string IdBytes(const std::vector<uint64_t>& ids) {
  return std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 8);
}

// Worker 0's sparse exchange of `step` on `shard` at `epoch`.
absl::Status Exchange(Shard& shard, uint64_t step, uint64_t epoch, bool push,
                      const std::vector<uint64_t>& ids,
                      std::vector<float>* rows = nullptr) {
  SparseExchangeRequest req;
  req.set_job_id("j");
  req.set_step(step);
  req.set_push(push);
  req.set_placement_epoch(epoch);
  SparseRows* rows_of = push ? req.add_gradients() : req.add_pull();
  rows_of->set_table("emb");
  rows_of->set_ids(IdBytes(ids));
  if (push) {
    std::vector<float> g(ids.size() * 4);
    for (size_t i = 0; i < g.size(); ++i) {
      // A function of (id, step, element) alone, whatever shard it goes to.
      g[i] = static_cast<float>((ids[i / 4] * 7 + step * 3 + i % 4) % 11) - 5;
    }
    rows_of->set_values(Bytes(g));
  }
  SparseExchangeResponse resp;
  absl::Notification done;
  absl::Status status;
  shard.SparseExchange(req, &resp, [&](absl::Status s) {
    status = s;
    done.Notify();
  });
  if (!done.WaitForNotificationWithTimeout(kReshardWait)) {
    return absl::DeadlineExceededError("no answer");
  }
  if (status.ok() && rows != nullptr && !push) {
    *rows = Floats(resp.rows(0).values());
  }
  return status;
}

// Step `step` under `p`: the dense push, and the rows of a fixed batch,
// each pushed to its owner (every owner gets the push).
void Step(ShardGroup& group, const RegisterJobRequest& reg, const Placement& p,
          uint64_t step) {
  group.Step(reg, p, step);
  std::vector<std::vector<uint64_t>> ids(3);
  for (uint64_t k = 0; k < 200; ++k) {
    const uint64_t id = (k * 37 + step * 101) % kIds;
    ids[RowOwner(id, Owners(p), 3)].push_back(id);
  }
  for (uint32_t s : Owners(p)) {
    ASSERT_TRUE(Exchange(group.shard(s), step, p.epoch(), true, ids[s]).ok());
  }
}

// Every row at `step` under `p`, each from its owner.
std::vector<float> Rows(ShardGroup& group, const Placement& p, uint64_t step) {
  std::vector<float> all;
  for (uint64_t id = 0; id < kIds; ++id) {
    std::vector<float> row;
    EXPECT_TRUE(Exchange(group.shard(RowOwner(id, Owners(p), 3)), step,
                         p.epoch(), false, {id}, &row)
                    .ok());
    all.insert(all.end(), row.begin(), row.end());
  }
  return all;
}

TEST(ShardReshardTablesTest, RowsMoveBitwiseAbortsChangeNothing) {
  const RegisterJobRequest reg = TwoOwners();
  ShardGroup group(3), calm(3);
  ASSERT_TRUE(group.RegisterAll(reg).ok());
  ASSERT_TRUE(calm.RegisterAll(reg).ok());
  const Placement& from = reg.placement();
  for (uint64_t t = 0; t < 3; ++t) {
    Step(group, reg, from, t);
    Step(calm, reg, from, t);
  }
  Placement to = Replaced(from, 1, [](uint32_t id) { return id % 2; });
  to.add_table_shards(2);  // [0, 1, 2]
  ReshardRequest prepare = Phase("j", 1, ReshardRequest::PREPARE);
  *prepare.mutable_placement() = to;
  // A move aborted after its PREPARE: the rows train on as they were.
  ASSERT_TRUE(group.OnEvery(Phase("j", 1, ReshardRequest::PAUSE, 3)).ok());
  EXPECT_EQ(Exchange(group.shard(0), 3, 0, true, {}).code(),
            absl::StatusCode::kUnavailable);
  ASSERT_TRUE(group.OnEvery(prepare).ok());
  ASSERT_TRUE(group.OnEvery(Phase("j", 1, ReshardRequest::ABORT)).ok());
  Step(group, reg, from, 3);
  Step(calm, reg, from, 3);
  ASSERT_EQ(Rows(group, from, 4), Rows(calm, from, 4));

  ASSERT_TRUE(group.OnEvery(Phase("j", 1, ReshardRequest::PAUSE, 4)).ok());
  // Bad fetches of rows: refused naming the field.
  struct Case {
    std::function<void(FetchChunksRequest&)> edit;
    absl::StatusCode code;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](auto& f) { f.set_rows_for_shard(5); },
       absl::StatusCode::kInvalidArgument, "rows_for_shard"},
      {[](auto& f) { f.add_table_shards(9); },
       absl::StatusCode::kInvalidArgument, "table_shards[3]"},
      {[](auto& f) { f.set_max_piece_bytes(64 << 20); },
       absl::StatusCode::kInvalidArgument, "max_piece_bytes"},
      {[](auto& f) { f.set_rows_offset(1ull << 40); },
       absl::StatusCode::kInvalidArgument, "rows_offset"},
      {[](auto& f) { f.add_chunk_ids(0); }, absl::StatusCode::kInvalidArgument,
       "chunk_ids"},
      {[](auto& f) { f.set_epoch(7); }, absl::StatusCode::kFailedPrecondition,
       "epoch"},
  };
  for (const Case& c : cases) {
    FetchChunksRequest f;
    f.set_job_id("j");
    f.set_epoch(1);
    f.set_rows_for_shard(2);
    *f.mutable_table_shards() = to.table_shards();
    c.edit(f);
    FetchChunksResponse got;
    const absl::Status st = group.shard(0).FetchChunks(f, &got);
    EXPECT_EQ(st.code(), c.code) << c.field << ": " << st;
    EXPECT_THAT(std::string(st.message()), HasSubstr(c.field));
  }
  std::vector<ReshardResponse> prepared;
  ASSERT_TRUE(group.OnEvery(prepare, &prepared).ok());
  EXPECT_GT(prepared[2].bytes_fetched(), 0u) << "shard 2 took rows";
  ASSERT_TRUE(group.OnEvery(Phase("j", 1, ReshardRequest::COMMIT)).ok());

  // The old epoch follows the new placement; an id of shard 2 on shard 0
  // is refused naming it.
  absl::Status st = Exchange(group.shard(0), 4, 0, true, {});
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted) << st;
  uint64_t theirs = 0;
  while (RowOwner(theirs, Owners(to), 3) != 2) ++theirs;
  st = Exchange(group.shard(0), 4, 1, false, {theirs});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("belongs to shard 2"));

  EXPECT_EQ(Rows(group, to, 4), Rows(calm, from, 4));
  for (uint64_t t = 4; t < 6; ++t) {
    Step(group, reg, to, t);
    Step(calm, reg, from, t);
  }
  EXPECT_EQ(Rows(group, to, 6), Rows(calm, from, 6));
  EXPECT_EQ(group.Params("j", to), calm.Params("j", from));
}

// The rows a PREPARE stages count against the receiving shard's
// memory_budget_bytes until its COMMIT or ABORT, as fetched chunks do.
// Shard 2 takes a third of the rows when [0, 1] -> [0, 1, 2]: with room for
// half of them the PREPARE is refused naming the budget and the shard, and
// the job goes on as it was; with room for one and a half, a PREPARE, an
// ABORT and a second PREPARE fit (the ABORT gave the bytes back), and the
// COMMIT too.
TEST(ShardReshardTablesTest, StagedRowsCountAgainstTheMemoryBudget) {
  const RegisterJobRequest reg = TwoOwners();
  const Placement& from = reg.placement();
  Placement to = Replaced(from, 1, [](uint32_t id) { return id % 2; });
  to.add_table_shards(2);
  ReshardRequest prepare = Phase("j", 1, ReshardRequest::PREPARE);
  *prepare.mutable_placement() = to;
  // What shard 2 holds, and what its rows take, without a bound.
  uint64_t held = 0, need = 0;
  {
    ShardGroup calm(3);
    ASSERT_TRUE(calm.RegisterAll(reg).ok());
    for (uint64_t t = 0; t < 2; ++t) Step(calm, reg, from, t);
    ShardStats shard_stats;
    calm.shard(2).Stats(StatsRequest(), &shard_stats);
    held = shard_stats.bytes_held();
    ASSERT_TRUE(calm.OnEvery(Phase("j", 1, ReshardRequest::PAUSE, 2)).ok());
    std::vector<ReshardResponse> prepared;
    ASSERT_TRUE(calm.OnEvery(prepare, &prepared).ok());
    ASSERT_TRUE(calm.OnEvery(Phase("j", 1, ReshardRequest::COMMIT)).ok());
    const JobStats stats = StatsOf(calm.shard(2), "j");
    ASSERT_EQ(stats.tables_size(), 1);
    need = std::max<uint64_t>(prepared[2].bytes_fetched(),
                              stats.tables(0).bytes_used());
    ASSERT_GT(need, 1000u);
  }
  for (const bool room : {false, true}) {
    SCOPED_TRACE(room ? "room for 1.5x the rows" : "room for half the rows");
    ShardGroup group(3);
    group.Replace(2, std::make_unique<Shard>(
                         Options(2, held + (room ? need * 3 / 2 : need / 2))));
    ASSERT_TRUE(group.RegisterAll(reg).ok());
    for (uint64_t t = 0; t < 2; ++t) Step(group, reg, from, t);
    ASSERT_TRUE(group.OnEvery(Phase("j", 1, ReshardRequest::PAUSE, 2)).ok());
    absl::Status st = group.OnEvery(prepare);
    if (!room) {
      EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
      EXPECT_THAT(std::string(st.message()),
                  HasSubstr("memory_budget_bytes: job j needs"));
      EXPECT_THAT(std::string(st.message()),
                  HasSubstr("on shard 2 for the table rows it would hold"));
      ASSERT_TRUE(group.OnEvery(Phase("j", 1, ReshardRequest::ABORT)).ok());
      Step(group, reg, from, 2);  // the old placement trains on
      continue;
    }
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_TRUE(group.OnEvery(Phase("j", 1, ReshardRequest::ABORT)).ok());
    ASSERT_TRUE(group.OnEvery(Phase("j", 1, ReshardRequest::PAUSE, 2)).ok());
    st = group.OnEvery(prepare);
    ASSERT_TRUE(st.ok()) << "the ABORT kept the staged bytes: " << st;
    ASSERT_TRUE(group.OnEvery(Phase("j", 1, ReshardRequest::COMMIT)).ok());
    Step(group, reg, to, 2);
  }
}

}  // namespace
}  // namespace shard_test
}  // namespace ps
