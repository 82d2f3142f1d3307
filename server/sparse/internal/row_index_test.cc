#include "server/sparse/internal/row_index.h"

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace sparse_internal {
namespace {

// Random inserts, moves and erases against a model map; ids live in a
// "slot -> id" array like the row store.
TEST(RowIndexTest, MatchesAModelUnderRandomOperations) {
  std::mt19937_64 rng(1);
  RowIndex index;
  std::vector<uint64_t> slot_id;  // dense, like RowStore
  std::unordered_map<uint64_t, uint32_t> model;
  auto find = [&](uint64_t id) {
    return index.Find(RowHash(id),
                      [&](uint32_t s) { return slot_id[s] == id; });
  };
  for (int op = 0; op < 200000; ++op) {
    const uint64_t id = rng() % 5000;  // small range: many hits and erases
    auto it = model.find(id);
    if (it == model.end()) {
      ASSERT_EQ(find(id), -1);
      const uint32_t slot = static_cast<uint32_t>(slot_id.size());
      slot_id.push_back(id);
      index.Insert(RowHash(id), slot);
      model[id] = slot;
    } else {
      ASSERT_EQ(find(id), it->second);
      if (rng() % 2) continue;
      // Erase, moving the last slot into the hole.
      const uint32_t slot = it->second;
      index.Erase(RowHash(id), slot);
      model.erase(it);
      const uint32_t last = static_cast<uint32_t>(slot_id.size() - 1);
      if (slot != last) {
        index.Move(RowHash(slot_id[last]), last, slot);
        slot_id[slot] = slot_id[last];
        model[slot_id[slot]] = slot;
      }
      slot_id.pop_back();
    }
    ASSERT_EQ(index.size(), model.size());
  }
  for (const auto& [id, slot] : model) ASSERT_EQ(find(id), slot);
  EXPECT_LE(index.size() * 4, index.capacity() * 3);
  EXPECT_EQ(index.bytes(), index.capacity() * 8);
}

TEST(RowIndexTest, BytesForPlansGrowthExactly) {
  RowIndex index;
  EXPECT_EQ(index.BytesFor(0), 0u);
  for (uint32_t n = 0; n < 1000; ++n) {
    const size_t planned = index.BytesFor(n + 1);
    index.Insert(RowHash(n), n);
    ASSERT_EQ(index.bytes(), planned) << n;
  }
  index.Clear();
  EXPECT_EQ(index.bytes(), 0u);
}

}  // namespace
}  // namespace sparse_internal
}  // namespace ps
