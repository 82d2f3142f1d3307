// JobTables' live re-placement: rows exported for a new owner's id range
// (SaveRowsWhere) and installed into its fresh tables (InstallRows) serve
// and train bitwise as tables that never moved; bad streams are refused
// with nothing changed; the pause refuses pushes from its step on.
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/not_retryable.h"
#include "common/text_proto.h"
#include "core/sparse_ids.h"
#include "core/table_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/sparse/byte_stream.h"
#include "server/sparse/job_tables.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kIds = 3000;

// ADAGRAD (per-row state), admission after 2 pushes, NORMAL init.
JobSpec Spec() {
  JobSpec spec;
  const std::string text =
      "name: \"j\" seed: 7 consistency { mode: BSP step_deadline_ms: 1000 } "
      "tables { name: \"emb\" dim: 3 init { kind: NORMAL scale: 0.1 } "
      "optimizer { kind: ADAGRAD learning_rate: 0.3 } admit_after: 2 }";
  EXPECT_TRUE(ParseTextProto(text, "job", &spec).ok());
  for (TableSpec& t : *spec.mutable_tables()) ApplyTableDefaults(&t);
  return spec;
}

// One layout of the rows: a JobTables per shard id (null where none).
struct Layout {
  std::vector<std::unique_ptr<JobTables>> shards;
  uint32_t num_shards = 0;
  std::vector<uint32_t> owners;
  uint32_t Owner(uint64_t id) const { return RowOwner(id, owners, num_shards); }
};

Layout Make(uint32_t num_shards, std::vector<uint32_t> owners) {
  Layout l;
  l.num_shards = num_shards;
  l.owners = owners;
  for (uint32_t s = 0; s < num_shards; ++s) {
    absl::StatusOr<std::unique_ptr<JobTables>> t =
        JobTables::Create(Spec(), {.shard_id = s,
                                   .num_shards = num_shards,
                                   .num_workers = 1,
                                   .split_buffer_bytes = 1u << 30,
                                   .owners = owners});
    EXPECT_TRUE(t.ok()) << t.status();
    l.shards.push_back(std::move(*t));
  }
  return l;
}

std::string Bytes(const void* p, size_t n) {
  return std::string(static_cast<const char*>(p), n);
}

// Worker 0's step `step` on shard `s`: push `ids` (with `grads`) and pull
// `pull`; the call's status and the pulled rows.
absl::Status Exchange(JobTables& t, uint64_t step, bool push,
                      const std::vector<uint64_t>& ids,
                      const std::vector<float>& grads,
                      const std::vector<uint64_t>& pull,
                      std::vector<float>* rows = nullptr) {
  SparseExchangeRequest req;
  req.set_job_id("j");
  req.set_step(step);
  req.set_push(push);
  if (push) {
    SparseRows* g = req.add_gradients();
    g->set_table("emb");
    g->set_ids(Bytes(ids.data(), ids.size() * 8));
    g->set_values(Bytes(grads.data(), grads.size() * 4));
  }
  SparseRows* p = req.add_pull();
  p->set_table("emb");
  p->set_ids(Bytes(pull.data(), pull.size() * 8));
  SparseExchangeResponse resp;
  std::optional<absl::Status> status;
  t.Exchange(req, &resp, [&](absl::Status s) { status = s; });
  if (!status.has_value()) return absl::InternalError("no answer");
  if (status->ok() && rows != nullptr && resp.rows_size() == 1) {
    rows->resize(resp.rows(0).values().size() / 4);
    std::memcpy(rows->data(), resp.rows(0).values().data(),
                resp.rows(0).values().size());
  }
  return *status;
}

// Step `step` of a fixed pseudo-random batch, each id to its owner (every
// shard gets the push, empty or not, as a BSP worker sends it).
void Train(Layout& l, uint64_t step) {
  uint64_t x = 0x9E3779B97F4A7C15ull * (step + 1);
  std::vector<std::vector<uint64_t>> ids(l.num_shards);
  std::vector<std::vector<float>> grads(l.num_shards);
  for (int k = 0; k < 400; ++k) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const uint64_t id = (x >> 33) % kIds;
    const uint32_t s = l.Owner(id);
    ids[s].push_back(id);
    for (int e = 0; e < 3; ++e) {
      grads[s].push_back(static_cast<float>((x >> (8 * e)) & 255) / 64 - 2);
    }
  }
  for (uint32_t s = 0; s < l.num_shards; ++s) {
    if (l.shards[s] == nullptr) continue;
    ASSERT_TRUE(Exchange(*l.shards[s], step, true, ids[s], grads[s], {}).ok());
  }
}

// Every id's row at step `step`, each from its owner.
std::vector<float> Rows(Layout& l, uint64_t step) {
  std::vector<float> all;
  for (uint64_t id = 0; id < kIds; ++id) {
    std::vector<float> row;
    EXPECT_TRUE(
        Exchange(*l.shards[l.Owner(id)], step, false, {}, {}, {id}, &row).ok());
    all.insert(all.end(), row.begin(), row.end());
  }
  return all;
}

// The rows of `from` whose owner under `to` is `n`, one stream per shard
// of `from` (each paused at `step`).
std::vector<std::string> StreamsFor(Layout& from, const Layout& to,
                                    uint32_t n) {
  std::vector<std::string> streams;
  for (uint32_t o = 0; o < from.num_shards; ++o) {
    std::string bytes;
    StringSink sink(&bytes);
    EXPECT_TRUE(from.shards[o]
                    ->SaveRowsWhere(
                        [&](uint64_t id) { return to.Owner(id) == n; }, sink)
                    .ok());
    streams.push_back(std::move(bytes));
  }
  return streams;
}

absl::Status Install(JobTables& t, const std::vector<std::string>& streams) {
  std::vector<StringSource> sources;
  for (const std::string& s : streams) sources.emplace_back(s);
  std::vector<ByteSource*> ptrs;
  for (StringSource& s : sources) ptrs.push_back(&s);
  return t.InstallRows(ptrs);
}

TEST(JobTablesMoveTest, MovedRowsServeAndTrainAsRowsThatStayed) {
  constexpr uint64_t kPause = 6;
  Layout moved = Make(2, {});
  Layout stayed = Make(2, {});
  for (uint64_t step = 0; step < kPause; ++step) {
    Train(moved, step);
    Train(stayed, step);
  }
  for (auto& t : moved.shards) {
    absl::StatusOr<bool> quiesced = t->Pause(kPause);
    ASSERT_TRUE(quiesced.ok()) << quiesced.status();
    EXPECT_TRUE(*quiesced);
  }
  // 2 shards -> 3, rows of index i on shard {2, 0, 1}[i].
  Layout next = Make(3, {2, 0, 1});
  for (uint32_t n = 0; n < 3; ++n) {
    ASSERT_TRUE(Install(*next.shards[n], StreamsFor(moved, next, n)).ok());
    EXPECT_EQ(next.shards[n]->version(), kPause);
  }
  EXPECT_EQ(Rows(next, kPause), Rows(stayed, kPause));
  // Optimizer state, push counts and admission counters came along: the
  // same pushes keep them bitwise equal.
  for (uint64_t step = kPause; step < kPause + 4; ++step) {
    Train(next, step);
    Train(stayed, step);
  }
  EXPECT_EQ(Rows(next, kPause + 4), Rows(stayed, kPause + 4));
}

TEST(JobTablesMoveTest, BadStreamsChangeNothing) {
  Layout old = Make(2, {});
  for (uint64_t step = 0; step < 3; ++step) Train(old, step);
  for (auto& t : old.shards) ASSERT_TRUE(t->Pause(3).ok());
  Layout next = Make(3, {});
  const std::vector<float> fresh = Rows(next, 0);
  // Shard 1's rows offered to shard 0: refused naming an id.
  absl::Status st = Install(*next.shards[0], StreamsFor(old, next, 1));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("does not belong here"));
  // A truncated stream, and garbage.
  std::vector<std::string> cut = StreamsFor(old, next, 0);
  cut[1].resize(cut[1].size() - 7);
  EXPECT_FALSE(Install(*next.shards[0], cut).ok());
  EXPECT_FALSE(Install(*next.shards[0], {std::string(100, 'x')}).ok());
  EXPECT_EQ(next.shards[0]->version(), 0u);
  EXPECT_EQ(Rows(next, 0), fresh);
  // The right streams still go in afterwards.
  EXPECT_TRUE(Install(*next.shards[0], StreamsFor(old, next, 0)).ok());
  EXPECT_EQ(next.shards[0]->version(), 3u);
  // Tables that exchanged already take no rows.
  EXPECT_EQ(Install(*next.shards[0], StreamsFor(old, next, 0)).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(JobTablesMoveTest,
     AnOwnersListNamingAShardTwiceOrPastTheClusterIsRefused) {
  for (const std::vector<uint32_t>& owners :
       {std::vector<uint32_t>{0, 0}, std::vector<uint32_t>{1, 3}}) {
    absl::StatusOr<std::unique_ptr<JobTables>> t =
        JobTables::Create(Spec(), {.shard_id = 0,
                                   .num_shards = 3,
                                   .num_workers = 1,
                                   .split_buffer_bytes = 1u << 30,
                                   .owners = owners});
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(t.status().message(), HasSubstr("placement.table_shards[1]"));
  }
}

TEST(JobTablesMoveTest, PauseRefusesPushesFromItsStepOn) {
  Layout l = Make(1, {});
  for (uint64_t step = 0; step < 2; ++step) Train(l, step);
  JobTables& t = *l.shards[0];
  // Past the version, nothing else changes.
  EXPECT_EQ(t.Pause(1).status().code(), absl::StatusCode::kFailedPrecondition);
  std::string bytes;
  StringSink sink(&bytes);
  EXPECT_EQ(t.SaveRowsWhere([](uint64_t) { return true; }, sink).code(),
            absl::StatusCode::kFailedPrecondition);
  // Paused ahead: step 2 still applies, step 3 is refused and retried.
  absl::StatusOr<bool> quiesced = t.Pause(3);
  ASSERT_TRUE(quiesced.ok());
  EXPECT_FALSE(*quiesced);
  EXPECT_FALSE(t.Quiesced(3));
  Train(l, 2);
  EXPECT_TRUE(t.Quiesced(3));
  absl::Status st = Exchange(t, 3, true, {1}, {1, 1, 1}, {1});
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_TRUE(IsPausedForReplacement(st));
  EXPECT_TRUE(Exchange(t, 3, false, {}, {}, {1}).ok()) << "pulls go on";
  EXPECT_EQ(t.version(), 3u);
  t.Unpause();
  EXPECT_TRUE(Exchange(t, 3, true, {1}, {1, 1, 1}, {1}).ok());
  EXPECT_EQ(t.version(), 4u);
}

}  // namespace
}  // namespace ps
