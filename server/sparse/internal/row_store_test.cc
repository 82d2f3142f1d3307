#include "server/sparse/internal/row_store.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace sparse_internal {
namespace {

std::vector<uint64_t> NewestFirst(const RowStore& s) {
  std::vector<uint64_t> ids;
  for (uint32_t slot = s.newest(); slot != RowStore::kNil;
       slot = s.Meta(slot).older) {
    ids.push_back(s.Meta(slot).id);
  }
  return ids;
}

TEST(RowStoreTest, AppendTouchRemoveKeepSlotsDenseAndLruOrdered) {
  RowStore s(/*floats_per_row=*/3, /*slab_rows_log2=*/2);
  EXPECT_EQ(s.record_bytes(), 16u + sizeof(RowMeta));
  for (uint64_t id = 10; id < 16; ++id) {
    const uint32_t slot = s.Append(id, id, /*pushes=*/id - 9);
    s.Values(slot)[0] = static_cast<float>(id);
  }
  EXPECT_EQ(s.bytes(), 2 * (4 * s.record_bytes() + sizeof(void*)));
  EXPECT_EQ(NewestFirst(s), (std::vector<uint64_t>{15, 14, 13, 12, 11, 10}));
  s.Touch(0, 3);  // id 10: newest, last_step stays 10 (max)
  EXPECT_EQ(s.Meta(0).last_step, 10u);
  EXPECT_EQ(s.Meta(0).pushes, 2u);
  s.Touch(1, 20);
  EXPECT_EQ(s.Meta(1).last_step, 20u);
  // MarkPush counts and steps without relinking.
  s.MarkPush(5, 30);
  s.MarkPush(5, 1);
  EXPECT_EQ(s.Meta(5).pushes, 8u);
  EXPECT_EQ(s.Meta(5).last_step, 30u);
  EXPECT_EQ(NewestFirst(s), (std::vector<uint64_t>{11, 10, 15, 14, 13, 12}));
  // Remove id 12 (slot 2): the last row (id 15, slot 5) moves into slot 2.
  EXPECT_EQ(s.Remove(2), 5u);
  EXPECT_EQ(s.Meta(2).id, 15u);
  EXPECT_EQ(s.Meta(2).pushes, 8u);  // the metadata moves with the row
  EXPECT_EQ(s.Values(2)[0], 15.0f);
  EXPECT_EQ(NewestFirst(s), (std::vector<uint64_t>{11, 10, 15, 14, 13}));
  // Remove the last row itself (id 14, slot 4): the second slab empties.
  EXPECT_EQ(s.Remove(4), 4u);
  EXPECT_EQ(s.bytes(), 4 * s.record_bytes() + sizeof(void*));
  EXPECT_EQ(NewestFirst(s), (std::vector<uint64_t>{11, 10, 15, 13}));
  EXPECT_EQ(s.Meta(s.oldest()).id, 13u);
  // A snapshot keeps the links.
  std::string copy;
  s.CopyRecords(&copy);
  ASSERT_EQ(copy.size(), 4 * s.record_bytes());
  EXPECT_EQ(RowStore::MetaAt(copy.data(), s.record_bytes(), s.newest()).id,
            11u);
  while (s.size() > 0) s.Remove(s.oldest());
  EXPECT_EQ(s.bytes(), 0u);
  EXPECT_EQ(s.newest(), RowStore::kNil);
}

// The frozen image of every slot, read through the capture.
std::string FrozenRecords(const RowStore& s, const RowCapture& c) {
  std::string out;
  for (uint32_t slot = 0; slot < c.rows(); ++slot) {
    out.append(s.FrozenRecord(c, slot), s.record_bytes());
  }
  return out;
}

TEST(RowStoreTest, FrozenImageSurvivesEveryKindOfChange) {
  RowStore s(/*floats_per_row=*/3, /*slab_rows_log2=*/2);
  for (uint64_t id = 0; id < 10; ++id) {
    const uint32_t slot = s.Append(id, id, 1);
    for (int e = 0; e < 3; ++e) s.Values(slot)[e] = static_cast<float>(id + e);
  }
  std::string before;
  s.CopyRecords(&before);
  const uint32_t oldest = s.oldest();
  std::shared_ptr<const RowCapture> c = s.Freeze();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(s.Freeze(), nullptr) << "one capture at a time";
  EXPECT_EQ(c->rows(), 10u);
  EXPECT_EQ(c->copied_rows(), 0u) << "nothing is copied up front";
  EXPECT_EQ(FrozenRecords(s, *c), before);

  s.Values(3)[1] = -1;     // an update
  s.Touch(5, 99);          // relinks 5 and its neighbours
  s.Remove(0);             // row 9 moves into slot 0
  s.Remove(s.size() - 1);  // the last slab (slots 8-9) is freed
  s.Remove(4);
  s.Remove(s.size() - 1);
  s.Append(50, 50, 1);  // reuses a vacated slot below the frozen size
  s.Append(51, 51, 1);
  EXPECT_EQ(FrozenRecords(s, *c), before);
  EXPECT_EQ(c->oldest(), oldest);
  EXPECT_LE(c->copied_rows(), 10u);
  EXPECT_GT(c->bytes(), c->copied_rows() * s.record_bytes() - 1);

  // Released: changes no longer copy, and a new capture starts empty.
  const size_t copied = c->copied_rows();
  s.Release(c.get());
  s.Values(1)[0] = 7;
  EXPECT_EQ(c->copied_rows(), copied);
  std::shared_ptr<const RowCapture> next = s.Freeze();
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->copied_rows(), 0u);
  std::string now;
  s.CopyRecords(&now);
  EXPECT_EQ(FrozenRecords(s, *next), now);
  // Clear copies what is left, so the image stays readable.
  s.Clear();
  EXPECT_EQ(FrozenRecords(s, *next), now);
}

// The ids whose dirty bit is set in `bits` (slot order of `s`).
std::vector<uint64_t> ChangedIds(const RowStore& s,
                                 const std::vector<uint64_t>& bits) {
  std::vector<uint64_t> ids;
  for (uint32_t slot = 0; slot < s.size(); ++slot) {
    if (RowStore::Changed(bits, slot)) ids.push_back(s.Meta(slot).id);
  }
  return ids;
}

TEST(RowStoreTest, ChangesFollowPushesAndMovesNotRelinks) {
  RowStore s(/*floats_per_row=*/3, /*slab_rows_log2=*/2);
  for (uint64_t id = 0; id < 70; ++id) s.Append(id, 0, 1);
  EXPECT_TRUE(s.TakeChanges().empty());  // not tracking
  s.TrackChanges();
  EXPECT_EQ(ChangedIds(s, s.TakeChanges()), std::vector<uint64_t>{});
  s.Touch(3, 1);       // pushed (relinks 3's neighbours: not changes)
  s.MarkPush(65, 1);   // pushed, in the second bitmap word
  s.Append(70, 1, 1);  // created
  s.Remove(65);        // 70 moves into slot 65 and keeps its bit
  s.Remove(10);        // 69 (clean) moves into slot 10
  std::vector<uint64_t> bits = s.TakeChanges();
  EXPECT_EQ(ChangedIds(s, bits), (std::vector<uint64_t>{3, 70}));
  // A new interval: clean, then only what changed since.
  EXPECT_TRUE(ChangedIds(s, s.TakeChanges()).empty());
  s.SetMeta(0, 5, 9, /*newest=*/true);
  EXPECT_EQ(ChangedIds(s, s.TakeChanges()), std::vector<uint64_t>{0});
  EXPECT_EQ(NewestFirst(s).front(), 0u);
  s.Clear();
  EXPECT_TRUE(s.TakeChanges().empty());
}

}  // namespace
}  // namespace sparse_internal
}  // namespace ps
