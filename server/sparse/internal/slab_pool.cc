#include "server/sparse/internal/slab_pool.h"

#include <sys/mman.h>

#include <cstdint>
#include <map>
#include <new>

namespace ps {
namespace sparse_internal {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kPage = 4096;

size_t RoundUp(size_t x, size_t to) { return (x + to - 1) / to * to; }

// `bytes` (a multiple of kHugePage) of fresh memory aligned to kHugePage,
// advised for huge pages. Throws std::bad_alloc.
char* MapRegion(size_t bytes) {
  const size_t span = bytes + kHugePage;
  void* p = mmap(nullptr, span, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = RoundUp(start, kHugePage);
  if (aligned > start) munmap(p, aligned - start);
  const uintptr_t tail = aligned + bytes;
  if (start + span > tail)
    munmap(reinterpret_cast<void*>(tail), start + span - tail);
  char* region = reinterpret_cast<char*>(aligned);
  // A hint: without THP (or with it off) the region simply has 4 KiB pages.
  madvise(region, bytes, MADV_HUGEPAGE);
  return region;
}

}  // namespace

SlabPool& SlabPool::For(size_t bytes) {
  static absl::Mutex* const mu = new absl::Mutex;
  static auto* const pools = new std::map<size_t, std::unique_ptr<SlabPool>>;
  const size_t rounded = RoundUp(bytes == 0 ? 1 : bytes, 64);
  absl::MutexLock lock(mu);
  std::unique_ptr<SlabPool>& pool = (*pools)[rounded];
  if (pool == nullptr) pool.reset(new SlabPool(rounded));
  return *pool;
}

SlabPool::SlabPool(size_t bytes) : bytes_(bytes) {}

char* SlabPool::Allocate() {
  if (bytes_ > kMaxPooledBytes) return MapRegion(RoundUp(bytes_, kHugePage));
  absl::MutexLock lock(&mu_);
  if (!free_.empty()) {
    char* block = free_.back();
    free_.pop_back();
    return block;
  }
  if (next_ == nullptr || static_cast<size_t>(end_ - next_) < bytes_) {
    next_ = MapRegion(kRegionBytes);
    end_ = next_ + kRegionBytes;
  }
  char* block = next_;
  next_ += bytes_;
  return block;
}

void SlabPool::Free(char* block) {
  if (bytes_ > kMaxPooledBytes) {
    munmap(block, RoundUp(bytes_, kHugePage));
    return;
  }
  // The whole pages inside the block go back to the OS.
  const uintptr_t begin = RoundUp(reinterpret_cast<uintptr_t>(block), kPage);
  const uintptr_t end =
      (reinterpret_cast<uintptr_t>(block) + bytes_) / kPage * kPage;
  if (end > begin) {
    madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  }
  absl::MutexLock lock(&mu_);
  free_.push_back(block);
}

}  // namespace sparse_internal
}  // namespace ps
