// Incremental checkpoints: a full snapshot plus the increments after it
// restore the table bit for bit (rows, state, push counts, last steps, LRU
// order, admission counters), with creates, updates, TTL and LRU evictions
// between them; a torn increment is refused.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/sparse/byte_stream.h"
#include "server/sparse/sparse_table.h"
#include "server/sparse/testing/sparse_table_test_util.h"

namespace ps {
namespace {

using sparse_test::CountingSgd;
using sparse_test::MustCreate;
using sparse_test::PushConst;
using sparse_test::SaveBytes;
using sparse_test::SmallOptions;
using ::testing::HasSubstr;

SparseTable::Options ChainOptions(bool lru) {
  SparseTable::Options o = SmallOptions();
  o.admission_count = 2;
  o.ttl_steps = 12;
  o.lru = lru;
  if (lru) o.memory_budget_bytes = 4 * 20000;  // evicts some of the base
  return o;
}

std::string Write(const SparseTable& t, SparseTable::Snapshot snap) {
  std::string bytes;
  StringSink sink(&bytes);
  if (!t.WriteSnapshot(std::move(snap), sink).ok()) return "write failed";
  return bytes;
}

struct Chain {
  std::vector<std::string> streams;   // full, then increments
  std::vector<std::string> expected;  // Save() at each one's instant
};

// 80 steps of random pushes (new rows, updates, counters) with TTL
// evictions, a snapshot every 10 steps; one of them written after more
// pushes (they belong to the next increment).
Chain RunChain(SparseTable& t) {
  Chain chain;
  std::mt19937_64 rng(42);
  CountingSgd sgd(t.options().dim);
  t.TrackChanges();
  for (uint64_t step = 0; step < 80; ++step) {
    // A big base (each id pushed twice: admitted), then a few hot ids
    // and some new ones (pending counters).
    std::vector<uint64_t> ids;
    const bool base = step < 10;
    const uint64_t space = base ? 2000 : 60;
    for (int k = 0; k < (base ? 200 : 40); ++k) {
      ids.push_back((rng() % space) * 977 + step % 3);
    }
    const float g = static_cast<float>(rng() % 100) / 50.0f - 1.0f;
    EXPECT_TRUE(PushConst(t, ids, g, step, sgd).ok());
    if (base) {
      EXPECT_TRUE(PushConst(t, ids, -g, step, sgd).ok());
    }
    t.EvictExpired(step);
    if (step % 10 != 9) continue;
    SparseTable::Snapshot snap = t.TakeSnapshot(/*incremental=*/true);
    EXPECT_EQ(snap.incremental(), !chain.streams.empty());
    chain.expected.push_back(SaveBytes(t));
    if (step == 39) {  // changed during the save: the next increment's
      EXPECT_TRUE(PushConst(t, {977, 2 * 977, 999999}, 0.5f, step, sgd).ok());
      t.EvictExpired(step + 5);
    }
    chain.streams.push_back(Write(t, std::move(snap)));
  }
  return chain;
}

class IncrementChainTest : public ::testing::TestWithParam<bool> {};

TEST_P(IncrementChainTest, FullPlusIncrementsRestoresExactly) {
  const SparseTable::Options o = ChainOptions(GetParam());
  auto a = MustCreate(o);
  ASSERT_NE(a, nullptr);
  const Chain chain = RunChain(*a);
  ASSERT_EQ(chain.streams.size(), 8u);
  for (size_t k = 0; k < chain.streams.size(); ++k) {
    auto b = MustCreate(o);
    for (size_t i = 0; i <= k; ++i) {
      StringSource src(chain.streams[i]);
      const absl::Status st = b->ApplyIncrement(src);
      ASSERT_TRUE(st.ok()) << "stream " << i << ": " << st;
      EXPECT_EQ(src.remaining(), 0u);
    }
    EXPECT_TRUE(SaveBytes(*b) == chain.expected[k]) << "after stream " << k;
    if (k > 1 && !GetParam()) {
      EXPECT_LT(chain.streams[k].size(), chain.streams[0].size() / 2)
          << "increment " << k << " is not smaller than the full one";
    }
  }
  // The restored table behaves the same: evictions and admissions.
  auto b = MustCreate(o);
  for (const std::string& s : chain.streams) {
    StringSource src(s);
    ASSERT_TRUE(b->ApplyIncrement(src).ok());
  }
  EXPECT_EQ(a->EvictExpired(95), b->EvictExpired(95));
  EXPECT_TRUE(SaveBytes(*a) == SaveBytes(*b));
  const SparseTable::Stats sa = a->GetStats(), sb = b->GetStats();
  EXPECT_EQ(sb.rows, sa.rows);
  EXPECT_EQ(sb.pending_admission, sa.pending_admission);
}

INSTANTIATE_TEST_SUITE_P(LruAndNot, IncrementChainTest, ::testing::Bool());

TEST(SparseTableIncrementTest, TornIncrementIsRefused) {
  const SparseTable::Options o = ChainOptions(false);
  auto a = MustCreate(o);
  const Chain chain = RunChain(*a);
  const std::string& inc = chain.streams[1];
  auto base = [&] {
    auto b = MustCreate(o);
    StringSource src(chain.streams[0]);
    EXPECT_TRUE(b->Restore(src).ok());
    return b;
  };
  {
    auto b = base();
    StringSource cut(absl::string_view(inc).substr(0, inc.size() - 30));
    const absl::Status st = b->ApplyIncrement(cut);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
    EXPECT_THAT(st.message(), HasSubstr("sparse table 'emb': increment"));
  }
  {
    auto b = base();
    std::string flipped = inc;
    flipped[inc.size() / 2] ^= 0x10;
    StringSource src(flipped);
    const absl::Status st = b->ApplyIncrement(src);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  }
  {
    SparseTable::Options other = o;
    other.name = "other";
    auto b = MustCreate(other);
    StringSource src(inc);
    EXPECT_EQ(b->ApplyIncrement(src).code(),
              absl::StatusCode::kInvalidArgument);
  }
  {
    auto b = base();
    StringSource junk("not a stream at all");
    EXPECT_EQ(b->ApplyIncrement(junk).code(), absl::StatusCode::kDataLoss);
  }
  // An increment is not a full stream.
  auto b = MustCreate(o);
  StringSource src(inc);
  EXPECT_EQ(b->Restore(src).code(), absl::StatusCode::kDataLoss);
}

TEST(SparseTableIncrementTest, WithoutTrackingEverySnapshotIsFull) {
  auto a = MustCreate(ChainOptions(false));
  CountingSgd sgd(4);
  ASSERT_TRUE(PushConst(*a, {1, 2, 3}, 1.0f, 0, sgd).ok());
  ASSERT_TRUE(PushConst(*a, {1, 2, 3}, 1.0f, 1, sgd).ok());
  const std::string saved = SaveBytes(*a);
  SparseTable::Snapshot snap = a->TakeSnapshot(/*incremental=*/true);
  EXPECT_FALSE(snap.incremental());
  EXPECT_TRUE(Write(*a, std::move(snap)) == saved);
  // After TrackChanges the first is full too, the next an increment.
  a->TrackChanges();
  EXPECT_FALSE(a->TakeSnapshot(true).incremental());
  EXPECT_TRUE(a->TakeSnapshot(true).incremental());
  // A Restore starts over with a full one.
  StringSource src(saved);
  ASSERT_TRUE(a->Restore(src).ok());
  EXPECT_FALSE(a->TakeSnapshot(true).incremental());
}

}  // namespace
}  // namespace ps
