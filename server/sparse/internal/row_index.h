// The id -> slot index of one stripe: open addressing with linear probing,
// 8 bytes per bucket, no tombstones (backward-shift deletion).
//
//   const uint64_t h = RowHash(id);
//   int64_t slot = index.Find(h, [&](uint32_t s) { return store.Id(s) == id;
//   }); if (slot < 0) index.Insert(h, store.Append(...));
//
// A bucket holds (upper 32 bits of the hash, slot + 1); 0 is empty. The home
// bucket is derived from the stored hash bits, so growing and deleting never
// need the ids; Find confirms a hash match with the caller's predicate (which
// reads the row it will use anyway). The load stays <= 3/4 (capacity doubles
// past it, never shrinks), so a row costs 8/0.75 .. 8/0.375 bytes of index.
// Not thread-safe: the stripe's mutex guards it.
#ifndef SERVER_SPARSE_INTERNAL_ROW_INDEX_H_
#define SERVER_SPARSE_INTERNAL_ROW_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "core/sparse_ids.h"
#include "server/sparse/internal/slab_pool.h"

namespace ps {
namespace sparse_internal {

// The table-internal hash of a row id: independent of ShardForId's (which
// uses the high bits of the unsalted mix). The stripe takes the low bits, the
// index the high 32 bits.
inline uint64_t RowHash(uint64_t id) {
  return MixId64(id ^ 0x5A17C0DE5EED1234ull);
}

// __builtin_prefetch(p) that the compiler keeps: GCC 12 at -O3 deleted
// whole loops of bare prefetches (SparseTable's batch prefetch compiled to
// nothing); the empty asm, which takes p, is a side effect it must keep.
inline void PrefetchLine(const void* p) {
  __builtin_prefetch(p);
  asm volatile("" : : "r"(p));
}

class RowIndex {
 public:
  // The largest slot an entry may name.
  static constexpr uint32_t kMaxSlot = 0xFFFFFFFEu;

  RowIndex() = default;
  RowIndex(const RowIndex&) = delete;
  RowIndex& operator=(const RowIndex&) = delete;
  RowIndex(RowIndex&& other) noexcept { *this = std::move(other); }
  RowIndex& operator=(RowIndex&& other) noexcept;

  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  size_t bytes() const { return capacity_ * sizeof(uint64_t); }

  // Bytes the index will hold once it has `entries` entries (it never
  // shrinks): for planning a push against a memory budget.
  size_t BytesFor(size_t entries) const;

  // The slot s with hash `hash` for which is_id(s) holds, or -1.
  template <typename IsId>
  int64_t Find(uint64_t hash, IsId is_id) const {
    if (capacity_ == 0) return -1;
    const uint32_t tag = static_cast<uint32_t>(hash >> 32);
    for (size_t i = tag & mask_;; i = (i + 1) & mask_) {
      const uint64_t b = buckets_[i];
      if (b == 0) return -1;
      const uint32_t slot = static_cast<uint32_t>(b) - 1;
      if (static_cast<uint32_t>(b >> 32) == tag && is_id(slot)) return slot;
    }
  }

  // Latency hiding for batches: prefetch the home bucket of `hash`, and
  // guess its slot (the first tag match in its run; -1 if none) so the
  // caller can prefetch the row. Hints only: never a substitute for Find.
  void Prefetch(uint64_t hash) const {
    if (capacity_ != 0) PrefetchLine(&buckets_[(hash >> 32) & mask_]);
  }
  int64_t GuessSlot(uint64_t hash) const {
    if (capacity_ == 0) return -1;
    const uint32_t tag = static_cast<uint32_t>(hash >> 32);
    for (size_t i = tag & mask_;; i = (i + 1) & mask_) {
      const uint64_t b = buckets_[i];
      if (b == 0) return -1;
      if (static_cast<uint32_t>(b >> 32) == tag)
        return static_cast<uint32_t>(b) - 1;
    }
  }

  // Adds hash -> slot. Requires: the id is not present, slot <= kMaxSlot.
  // Grows (allocates) when the load would pass 3/4.
  void Insert(uint64_t hash, uint32_t slot);

  // The entry (hash, old_slot) now names new_slot. Requires it to exist.
  void Move(uint64_t hash, uint32_t old_slot, uint32_t new_slot);

  // Removes the entry (hash, slot). Requires it to exist.
  void Erase(uint64_t hash, uint32_t slot);

  // Drops every entry and the memory.
  void Clear();

 private:
  static size_t CapacityFor(size_t entries);
  size_t Locate(uint64_t hash, uint32_t slot) const;
  void Rehash(size_t new_capacity);

  // A SlabPool block (huge pages where the OS allows), as uint64_t[].
  Slab block_;
  uint64_t* buckets_ = nullptr;
  size_t capacity_ = 0;  // 0 or a power of two
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace sparse_internal
}  // namespace ps

#endif  // SERVER_SPARSE_INTERNAL_ROW_INDEX_H_
