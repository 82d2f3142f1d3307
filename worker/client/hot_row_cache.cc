#include "worker/client/hot_row_cache.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ps {

absl::StatusOr<std::unique_ptr<HotRowCache>> HotRowCache::Create(
    const HotRowCacheOptions& options) {
  if (options.dim == 0) {
    return absl::InvalidArgumentError("dim: must be >= 1");
  }
  const uint64_t row_bytes = uint64_t{options.dim} * 4 + kRowCacheOverheadBytes;
  if (options.capacity_bytes < row_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("row_cache_bytes: ", options.capacity_bytes,
                     " is under one row's ", row_bytes, " bytes"));
  }
  return std::unique_ptr<HotRowCache>(new HotRowCache(options));
}

HotRowCache::HotRowCache(const HotRowCacheOptions& options)
    : dim_(options.dim),
      max_staleness_(options.max_staleness),
      policy_(options.policy),
      capacity_rows_(options.capacity_bytes /
                     (uint64_t{options.dim} * 4 + kRowCacheOverheadBytes)) {}

void HotRowCache::Unlink(uint32_t s) {
  Entry& e = entries_[s];
  auto it = lists_.find(e.freq);
  List& l = it->second;
  if (e.prev != kNone) entries_[e.prev].next = e.next;
  if (e.next != kNone) entries_[e.next].prev = e.prev;
  if (l.head == s) l.head = e.next;
  if (l.tail == s) l.tail = e.prev;
  e.prev = e.next = kNone;
  if (l.head == kNone) lists_.erase(it);
}

void HotRowCache::PushFront(uint32_t s) {
  Entry& e = entries_[s];
  List& l = lists_[e.freq];
  e.prev = kNone;
  e.next = l.head;
  if (l.head != kNone) entries_[l.head].prev = s;
  l.head = s;
  if (l.tail == kNone) l.tail = s;
}

void HotRowCache::Touch(uint32_t s) {
  Entry& e = entries_[s];
  const uint64_t old = e.freq;
  Unlink(s);
  if (policy_ == RowCachePolicy::kLfu) {
    ++e.freq;
    if (min_freq_ == old && !lists_.contains(old)) min_freq_ = e.freq;
  }
  PushFront(s);
}

uint32_t HotRowCache::Allocate() {
  if (entries_.size() < capacity_rows_) {
    entries_.emplace_back();
    rows_.resize(entries_.size() * dim_);
    return static_cast<uint32_t>(entries_.size() - 1);
  }
  // Full: the least recent row of the lowest frequency goes.
  const uint32_t victim = lists_.at(min_freq_).tail;
  Unlink(victim);
  index_.erase(entries_[victim].id);
  ++stats_.evictions;
  return victim;
}

void HotRowCache::Read(uint64_t version, absl::Span<const uint64_t> ids,
                       absl::Span<float> rows, RowCacheMisses* misses) {
  misses->ids.clear();
  misses->at.clear();
  const size_t row_bytes = size_t{dim_} * sizeof(float);
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = index_.find(ids[i]);
    if (it != index_.end()) {
      Touch(it->second);
      if (entries_[it->second].version + max_staleness_ >= version &&
          max_staleness_ > 0) {
        std::memcpy(rows.data() + i * dim_, RowOf(it->second), row_bytes);
        ++stats_.hits;
        continue;
      }
    }
    misses->ids.push_back(ids[i]);
    misses->at.push_back(static_cast<uint32_t>(i));
  }
  stats_.misses += misses->ids.size();
  misses->rows.resize(misses->ids.size() * dim_);
}

void HotRowCache::Complete(uint64_t version, const RowCacheMisses& misses,
                           absl::Span<float> rows) {
  const size_t row_bytes = size_t{dim_} * sizeof(float);
  for (size_t k = 0; k < misses.ids.size(); ++k) {
    const float* pulled = misses.rows.data() + k * dim_;
    std::memcpy(rows.data() + size_t{misses.at[k]} * dim_, pulled, row_bytes);
    auto [it, inserted] = index_.try_emplace(misses.ids[k], kNone);
    if (inserted) {
      const uint32_t s = Allocate();
      // Allocate may have erased another id: `it` is stale after a rehash
      // or erase, so the slot is written through a fresh lookup.
      index_[misses.ids[k]] = s;
      Entry& e = entries_[s];
      e.id = misses.ids[k];
      e.freq = 1;
      PushFront(s);
      min_freq_ = 1;
      e.version = version;
      std::memcpy(RowOf(s), pulled, row_bytes);
    } else {
      // Read already counted this read; a newer pull refreshes the row.
      Entry& e = entries_[it->second];
      e.version = std::max(e.version, version);
      std::memcpy(RowOf(it->second), pulled, row_bytes);
    }
  }
}

HotRowCacheStats HotRowCache::stats() const {
  HotRowCacheStats s = stats_;
  s.rows = index_.size();
  s.bytes_used = s.rows * (uint64_t{dim_} * 4 + kRowCacheOverheadBytes);
  s.bytes_saved = s.hits * (16 + uint64_t{dim_} * 4);
  return s;
}

}  // namespace ps
