#include "server/sparse/internal/admission_counts.h"

#include "server/sparse/internal/row_index.h"

namespace ps {
namespace sparse_internal {
namespace {

constexpr size_t kMinCapacity = 16;

}  // namespace

size_t AdmissionCounts::CapacityFor(size_t entries) {
  if (entries == 0) return 0;
  size_t c = kMinCapacity;
  while (entries * 4 > c * 3) c *= 2;
  return c;
}

size_t AdmissionCounts::BytesFor(size_t entries) const {
  const size_t c = CapacityFor(entries);
  return (c > capacity_ ? c : capacity_) * kBytesPerBucket;
}

size_t AdmissionCounts::Home(uint64_t id) const {
  return (RowHash(id) >> 32) & mask_;
}

size_t AdmissionCounts::Probe(uint64_t id) const {
  size_t i = Home(id);
  while (counts_[i] != 0 && ids_[i] != id) i = (i + 1) & mask_;
  return i;
}

uint32_t AdmissionCounts::Get(uint64_t id) const {
  if (capacity_ == 0) return 0;
  return counts_[Probe(id)];
}

void AdmissionCounts::Rehash(size_t new_capacity) {
  std::unique_ptr<uint64_t[]> old_ids = std::move(ids_);
  std::unique_ptr<uint32_t[]> old_counts = std::move(counts_);
  const size_t old_capacity = capacity_;
  ids_.reset(new uint64_t[new_capacity]());
  counts_.reset(new uint32_t[new_capacity]());
  capacity_ = new_capacity;
  mask_ = new_capacity - 1;
  for (size_t i = 0; i < old_capacity; ++i) {
    if (old_counts[i] == 0) continue;
    const size_t j = Probe(old_ids[i]);
    ids_[j] = old_ids[i];
    counts_[j] = old_counts[i];
  }
}

void AdmissionCounts::Set(uint64_t id, uint32_t count) {
  if (capacity_ != 0) {
    const size_t i = Probe(id);
    if (counts_[i] != 0) {
      counts_[i] = count;
      return;
    }
  }
  const size_t want = CapacityFor(size_ + 1);
  if (want > capacity_) Rehash(want);
  const size_t i = Probe(id);
  ids_[i] = id;
  counts_[i] = count;
  ++size_;
}

void AdmissionCounts::Erase(uint64_t id) {
  if (capacity_ == 0) return;
  size_t hole = Probe(id);
  if (counts_[hole] == 0) return;
  for (size_t j = (hole + 1) & mask_; counts_[j] != 0; j = (j + 1) & mask_) {
    const size_t home = Home(ids_[j]);
    const bool stays =
        hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (stays) continue;
    ids_[hole] = ids_[j];
    counts_[hole] = counts_[j];
    hole = j;
  }
  counts_[hole] = 0;
  --size_;
}

void AdmissionCounts::Clear() {
  ids_.reset();
  counts_.reset();
  capacity_ = mask_ = size_ = 0;
}

}  // namespace sparse_internal
}  // namespace ps
