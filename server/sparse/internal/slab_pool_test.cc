#include "server/sparse/internal/slab_pool.h"

#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace sparse_internal {
namespace {

TEST(SlabPoolTest, BlocksAreAlignedDisjointAndReused) {
  SlabPool& pool = SlabPool::For(1000);
  EXPECT_EQ(pool.block_bytes(), 1024u);  // rounded up to 64
  EXPECT_EQ(&SlabPool::For(1000), &pool);
  EXPECT_EQ(&SlabPool::For(1024), &pool);
  EXPECT_NE(&SlabPool::For(2048), &pool);
  // More than a region's worth, so a second region is mapped.
  const size_t n = SlabPool::kRegionBytes / 1024 + 10;
  std::vector<char*> blocks;
  std::set<uintptr_t> starts;
  for (size_t i = 0; i < n; ++i) {
    char* b = pool.Allocate();
    ASSERT_EQ(reinterpret_cast<uintptr_t>(b) % 64, 0u);
    std::memset(b, static_cast<int>(i & 0xFF), 1024);
    blocks.push_back(b);
    starts.insert(reinterpret_cast<uintptr_t>(b));
  }
  // Disjoint: every block still holds its own byte pattern.
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(static_cast<unsigned char>(blocks[i][0]), i & 0xFF) << i;
    ASSERT_EQ(static_cast<unsigned char>(blocks[i][1023]), i & 0xFF) << i;
  }
  EXPECT_EQ(starts.size(), n);
  char* freed = blocks[5];
  pool.Free(freed);
  EXPECT_EQ(pool.Allocate(), freed);  // a freed block is reused
  for (char* b : blocks) pool.Free(b);
}

TEST(SlabPoolTest, LargeBlocksHaveTheirOwnRegion) {
  const size_t bytes = SlabPool::kMaxPooledBytes + 4096;
  Slab a = NewSlab(bytes);
  Slab b = NewSlab(bytes);
  ASSERT_NE(a.get(), nullptr);
  ASSERT_NE(b.get(), nullptr);
  std::memset(a.get(), 1, bytes);
  std::memset(b.get(), 2, bytes);
  EXPECT_EQ(a[bytes - 1], 1);
  EXPECT_EQ(b[0], 2);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.get()) % (size_t{2} << 20), 0u);
}

}  // namespace
}  // namespace sparse_internal
}  // namespace ps
