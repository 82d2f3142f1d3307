#include "server/sparse/internal/row_index.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

namespace ps {
namespace sparse_internal {
namespace {

constexpr size_t kMinCapacity = 16;

inline uint64_t Bucket(uint64_t hash, uint32_t slot) {
  return (hash & 0xFFFFFFFF00000000ull) | (uint64_t{slot} + 1);
}

}  // namespace

size_t RowIndex::CapacityFor(size_t entries) {
  if (entries == 0) return 0;
  size_t c = kMinCapacity;
  while (entries * 4 > c * 3) c *= 2;
  return c;
}

size_t RowIndex::BytesFor(size_t entries) const {
  const size_t c = CapacityFor(entries);
  return (c > capacity_ ? c : capacity_) * sizeof(uint64_t);
}

RowIndex& RowIndex::operator=(RowIndex&& other) noexcept {
  block_ = std::move(other.block_);
  buckets_ = std::exchange(other.buckets_, nullptr);
  capacity_ = std::exchange(other.capacity_, 0);
  mask_ = std::exchange(other.mask_, 0);
  size_ = std::exchange(other.size_, 0);
  return *this;
}

void RowIndex::Rehash(size_t new_capacity) {
  const Slab old_block = std::move(block_);
  const uint64_t* old = buckets_;
  const size_t old_capacity = capacity_;
  block_ = NewSlab(new_capacity * sizeof(uint64_t));
  buckets_ = reinterpret_cast<uint64_t*>(block_.get());
  std::fill(buckets_, buckets_ + new_capacity, uint64_t{0});
  capacity_ = new_capacity;
  mask_ = new_capacity - 1;
  for (size_t i = 0; i < old_capacity; ++i) {
    const uint64_t b = old[i];
    if (b == 0) continue;
    size_t j = (b >> 32) & mask_;
    while (buckets_[j] != 0) j = (j + 1) & mask_;
    buckets_[j] = b;
  }
}

void RowIndex::Insert(uint64_t hash, uint32_t slot) {
  const size_t want = CapacityFor(size_ + 1);
  if (want > capacity_) Rehash(want);
  size_t i = (hash >> 32) & mask_;
  while (buckets_[i] != 0) i = (i + 1) & mask_;
  buckets_[i] = Bucket(hash, slot);
  ++size_;
}

size_t RowIndex::Locate(uint64_t hash, uint32_t slot) const {
  const uint64_t want = Bucket(hash, slot);
  for (size_t i = (hash >> 32) & mask_;; i = (i + 1) & mask_) {
    if (buckets_[i] == want) return i;
    if (buckets_[i] == 0) std::abort();  // programmer bug: entry must exist
  }
}

void RowIndex::Move(uint64_t hash, uint32_t old_slot, uint32_t new_slot) {
  buckets_[Locate(hash, old_slot)] = Bucket(hash, new_slot);
}

void RowIndex::Erase(uint64_t hash, uint32_t slot) {
  size_t hole = Locate(hash, slot);
  // Backward shift: pull later entries of the run into the hole unless their
  // home lies cyclically in (hole, j].
  for (size_t j = (hole + 1) & mask_; buckets_[j] != 0; j = (j + 1) & mask_) {
    const size_t home = (buckets_[j] >> 32) & mask_;
    const bool stays =
        hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (stays) continue;
    buckets_[hole] = buckets_[j];
    hole = j;
  }
  buckets_[hole] = 0;
  --size_;
}

void RowIndex::Clear() {
  block_.reset();
  buckets_ = nullptr;
  capacity_ = mask_ = size_ = 0;
}

}  // namespace sparse_internal
}  // namespace ps
