// Save/Restore: bitwise round trips, re-striping, and rejected streams that
// leave the table unchanged.
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/checkpoint.h"
#include "server/sparse/byte_stream.h"
#include "server/sparse/sparse_table.h"
#include "server/sparse/testing/sparse_table_test_util.h"

namespace ps {
namespace {

using sparse_test::CountingSgd;
using sparse_test::MustCreate;
using sparse_test::PullRows;
using sparse_test::PushConst;
using sparse_test::SaveBytes;
using sparse_test::SmallOptions;
using ::testing::HasSubstr;

SparseTable::Options CheckpointOptions() {
  SparseTable::Options o = SmallOptions();
  o.admission_count = 2;
  o.ttl_steps = 5;
  return o;
}

// 300 rows with distinct states and steps, plus 100 pending admissions.
void Fill(SparseTable& t) {
  CountingSgd sgd(t.options().dim);
  for (uint64_t step = 0; step < 3; ++step) {
    std::vector<uint64_t> ids;
    for (uint64_t id = 0; id < 300; id += 1 + step) ids.push_back(id * 977);
    ASSERT_TRUE(PushConst(t, ids, 0.25f * (step + 1), step, sgd).ok());
    ASSERT_TRUE(PushConst(t, ids, -0.5f, step + 1, sgd).ok());
  }
  std::vector<uint64_t> pending;
  for (uint64_t id = 1; id <= 100; ++id) pending.push_back(id * 1000003);
  ASSERT_TRUE(PushConst(t, pending, 1.0f, 9, sgd).ok());
}

absl::Status RestoreFrom(SparseTable& t, const std::string& bytes) {
  StringSource src(bytes);
  return t.Restore(src);
}

TEST(SparseTableCheckpointTest, SnapshotWritesTheStateOfItsInstant) {
  auto a = MustCreate(CheckpointOptions());
  Fill(*a);
  const std::string before = SaveBytes(*a);
  SparseTable::Snapshot snap = a->TakeSnapshot();
  // Pushes after the snapshot (new rows, counters, updates) are not in it.
  CountingSgd sgd(a->options().dim);
  ASSERT_TRUE(PushConst(*a, {977, 5, 6, 7}, 3.0f, 10, sgd).ok());
  ASSERT_TRUE(PushConst(*a, {5, 6, 7}, 3.0f, 11, sgd).ok());
  ASSERT_NE(SaveBytes(*a), before);
  std::string written;
  StringSink sink(&written);
  ASSERT_TRUE(a->WriteSnapshot(std::move(snap), sink).ok());
  EXPECT_TRUE(written == before);
}

// Copy on write: nothing is copied up front; pushes, new rows and
// evictions during the write (from another thread) copy only the rows they
// change; the written stream is the snapshot's instant exactly.
TEST(SparseTableCheckpointTest, SnapshotIsCopyOnWriteAndExchangesGoOn) {
  SparseTable::Options o = CheckpointOptions();
  o.lru = true;
  o.memory_budget_bytes = 64 << 20;  // lru needs one; none is evicted by it
  auto a = MustCreate(o);
  ASSERT_NE(a, nullptr);
  CountingSgd sgd(o.dim);
  std::vector<uint64_t> all;
  for (uint64_t id = 0; id < 20000; ++id) all.push_back(id * 7919);
  for (uint64_t step = 0; step < 2; ++step) {
    ASSERT_TRUE(PushConst(*a, all, 0.5f, step, sgd).ok());
  }
  const std::string before = SaveBytes(*a);
  SparseTable::Snapshot snap = a->TakeSnapshot();
  EXPECT_TRUE(snap.copy_on_write());
  EXPECT_EQ(snap.held_bytes(), 0u);
  // A second snapshot meanwhile copies its stripes, and writes its instant.
  {
    SparseTable::Snapshot second = a->TakeSnapshot();
    EXPECT_FALSE(second.copy_on_write());
    EXPECT_GT(second.held_bytes(), 0u);
  }

  // 100 rows changed before the write: about their bytes are held.
  std::vector<uint64_t> changed(all.begin(), all.begin() + 100);
  ASSERT_TRUE(PushConst(*a, changed, 1.0f, 2, sgd).ok());
  const uint64_t held = snap.held_bytes();
  EXPECT_GT(held, 0u);
  EXPECT_LT(held, 20000u * 64) << "more than the changed rows";

  std::atomic<bool> stop{false};
  std::thread pusher([&] {
    CountingSgd own(o.dim);
    for (uint64_t step = 3; !stop.load(); ++step) {
      std::vector<uint64_t> ids;
      for (uint64_t k = 0; k < 64; ++k)
        ids.push_back(((step * 64 + k) % 30000) * 7919);
      ASSERT_TRUE(PushConst(*a, ids, 0.25f, step, own).ok());
      a->EvictExpired(step);
    }
  });
  std::string written;
  StringSink sink(&written);
  const absl::Status st = a->WriteSnapshot(std::move(snap), sink);
  stop = true;
  pusher.join();
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_TRUE(written == before);
  // Released: the next snapshot is copy on write again.
  EXPECT_TRUE(a->TakeSnapshot().copy_on_write());
}

TEST(SparseTableCheckpointTest, RoundTripIsBitwise) {
  auto a = MustCreate(CheckpointOptions());
  Fill(*a);
  const std::string saved = SaveBytes(*a);
  auto b = MustCreate(CheckpointOptions());
  ASSERT_TRUE(RestoreFrom(*b, saved).ok());
  // Rows, state, steps, LRU order, counters.
  EXPECT_TRUE(SaveBytes(*b) == saved);
  const SparseTable::Stats sa = a->GetStats(), sb = b->GetStats();
  EXPECT_EQ(sb.rows, sa.rows);
  EXPECT_EQ(sb.pending_admission, 100u);
  EXPECT_GT(sb.bytes_used, 0u);
  EXPECT_LE(sb.bytes_used, sa.bytes_used);  // hash tables sized for content
  // Metadata and counters restored: same TTL evictions, same admissions.
  EXPECT_EQ(a->EvictExpired(8), b->EvictExpired(8));
  CountingSgd sa_sgd(4), sb_sgd(4);
  ASSERT_TRUE(PushConst(*a, {1000003, 5}, 1.0f, 10, sa_sgd).ok());
  ASSERT_TRUE(PushConst(*b, {1000003, 5}, 1.0f, 10, sb_sgd).ok());
  EXPECT_TRUE(SaveBytes(*a) == SaveBytes(*b));
}

TEST(SparseTableCheckpointTest, PushCountsSurvive) {
  SparseTable::Options o = CheckpointOptions();
  o.hot_ids = 1024;  // every row
  auto a = MustCreate(o);
  Fill(*a);
  const std::vector<HotId> want = a->GetStats().hottest;
  ASSERT_EQ(want.size(), 300u);
  // Fill pushes index i twice in each step s with i % (s + 1) == 0: i = 0
  // (id 0) is among the 50 rows with 6 pushes, admission's 2 included.
  EXPECT_EQ(want[0].id, 0u);
  EXPECT_EQ(want[0].pushes, 6u);
  EXPECT_EQ(want[49].pushes, 6u);
  EXPECT_EQ(want[50].pushes, 4u);
  EXPECT_EQ(want[299].pushes, 2u);
  for (uint32_t stripes : {4u, 16u}) {
    o.num_stripes = stripes;
    auto b = MustCreate(o);
    ASSERT_TRUE(RestoreFrom(*b, SaveBytes(*a)).ok());
    const std::vector<HotId> got = b->GetStats().hottest;
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].id, want[i].id) << i;
      EXPECT_EQ(got[i].pushes, want[i].pushes) << i;
    }
    // And they go on counting: index 1 (id 977, 2 pushes) overtakes.
    CountingSgd sgd(o.dim);
    for (uint64_t step = 9; step < 14; ++step) {
      ASSERT_TRUE(PushConst(*b, {977}, 1.0f, step, sgd).ok());
    }
    EXPECT_EQ(b->GetStats().hottest[0].id, 977u);
    EXPECT_EQ(b->GetStats().hottest[0].pushes, 7u);
  }
}

TEST(SparseTableCheckpointTest, RestoresIntoAnotherStripeCount) {
  auto a = MustCreate(CheckpointOptions());
  Fill(*a);
  SparseTable::Options o = CheckpointOptions();
  o.num_stripes = 16;
  auto b = MustCreate(o);
  ASSERT_TRUE(RestoreFrom(*b, SaveBytes(*a)).ok());
  std::vector<uint64_t> ids;
  for (uint64_t id = 0; id < 300; ++id) ids.push_back(id * 977);
  EXPECT_EQ(PullRows(*b, ids), PullRows(*a, ids));
  EXPECT_EQ(b->GetStats().rows, a->GetStats().rows);
  EXPECT_EQ(b->GetStats().pending_admission, 100u);
}

TEST(SparseTableCheckpointTest, LruOrderSurvives) {
  SparseTable::Options o = SmallOptions();
  o.num_stripes = 1;
  o.slab_rows = 4;
  o.lru = true;
  o.memory_budget_bytes = 2 * (4 * 56 + 8) + 16 * 8;  // 8 rows
  auto a = MustCreate(o);
  CountingSgd sgd(o.dim);
  for (uint64_t id : {5, 3, 7, 1, 2, 8, 6, 4}) {
    ASSERT_TRUE(PushConst(*a, {id}, 1.0f, 1, sgd).ok());
  }
  auto b = MustCreate(o);
  ASSERT_TRUE(RestoreFrom(*b, SaveBytes(*a)).ok());
  ASSERT_TRUE(PushConst(*b, {100, 101}, 1.0f, 2, sgd).ok());
  const std::vector<float> gone = PullRows(*b, {5, 3});
  EXPECT_EQ(b->GetStats().lru_evictions, 2u);
  EXPECT_NE(PullRows(*a, {5, 3}), gone);  // a still holds 5 and 3
  EXPECT_EQ(PullRows(*b, {7}), PullRows(*a, {7}));
}

TEST(SparseTableCheckpointTest, CorruptOrTruncatedStreamsLeaveTableUnchanged) {
  auto a = MustCreate(CheckpointOptions());
  Fill(*a);
  const std::string saved = SaveBytes(*a);
  auto b = MustCreate(CheckpointOptions());
  CountingSgd sgd(4);
  ASSERT_TRUE(PushConst(*b, {11, 12}, 3.0f, 1, sgd).ok());
  const std::string before = SaveBytes(*b);
  // Every byte of the header, then a stride through the body.
  for (size_t at = 0; at < saved.size(); at += at < 64 ? 1 : 97) {
    std::string bad = saved;
    bad[at] ^= 0x20;
    const absl::Status st = RestoreFrom(*b, bad);
    ASSERT_FALSE(st.ok()) << "flipped byte " << at;
    EXPECT_THAT(std::string(st.message()), HasSubstr("sparse table 'emb'"));
  }
  for (size_t len = 0; len < saved.size(); len += len < 64 ? 1 : 101) {
    const absl::Status st = RestoreFrom(*b, saved.substr(0, len));
    ASSERT_EQ(st.code(), absl::StatusCode::kDataLoss) << "length " << len;
  }
  EXPECT_TRUE(SaveBytes(*b) == before);
}

void StoreLe(std::string* s, size_t at, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) (*s)[at + i] = static_cast<char>(v >> 8 * i);
}

TEST(SparseTableCheckpointTest, OldVersionAndZeroPushesAreRejected) {
  SparseTable::Options o = SmallOptions();
  o.num_stripes = 1;
  auto a = MustCreate(o);
  CountingSgd sgd(o.dim);
  ASSERT_TRUE(PushConst(*a, {5}, 1.0f, 1, sgd).ok());
  const std::string saved = SaveBytes(*a);
  auto b = MustCreate(o);
  const std::string before = SaveBytes(*b);

  std::string v1 = saved;
  StoreLe(&v1, 8, 1, 4);  // the version, checked before the header's CRC
  absl::Status st = RestoreFrom(*b, v1);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("format version 1, want 2 (older streams lack"));

  // header: 28 bytes + name "emb" + CRC; section: 20 bytes, then the row
  // {id, last_step, pushes, 6 floats} and the body's CRC.
  const size_t body = 28 + 3 + 4 + 20, row_bytes = 24 + 6 * 4;
  std::string zero = saved;
  ASSERT_EQ(zero.substr(body + 16, 8), std::string("\1\0\0\0\0\0\0\0", 8));
  StoreLe(&zero, body + 16, 0, 8);
  StoreLe(&zero, body + row_bytes,
          Crc32c(absl::string_view(zero.data() + body, row_bytes)), 4);
  st = RestoreFrom(*b, zero);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(st.message()), HasSubstr("row id 5 has 0 pushes"));
  EXPECT_TRUE(SaveBytes(*b) == before);
}

TEST(SparseTableCheckpointTest, MismatchesAreRejected) {
  auto a = MustCreate(CheckpointOptions());
  Fill(*a);
  const std::string saved = SaveBytes(*a);
  SparseTable::Options o = CheckpointOptions();
  o.dim = 5;
  absl::Status st = RestoreFrom(*MustCreate(o), saved);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("dim 4"));
  o = CheckpointOptions();
  o.name = "other";
  EXPECT_EQ(RestoreFrom(*MustCreate(o), saved).code(),
            absl::StatusCode::kInvalidArgument);
  o = CheckpointOptions();
  o.id_bound = 1000;
  st = RestoreFrom(*MustCreate(o), saved);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(st.message()), HasSubstr("out of range"));
  o = CheckpointOptions();
  o.num_stripes = 1;
  o.slab_rows = 4;
  o.memory_budget_bytes = 4096;
  st = RestoreFrom(*MustCreate(o), saved);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace ps
