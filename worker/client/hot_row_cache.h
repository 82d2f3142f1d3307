// HotRowCache: a worker's copy of the table rows it read recently, reused
// for a bounded number of steps instead of pulled again (issue 30 item 2;
// TableSpec.max_row_staleness and row_cache_bytes, docs/SPARSE.md "Hot-row
// cache"). Transport-free: the trainer splits each read into the rows the
// cache answers and the misses it pulls, then hands the pulled rows back.
//
//   PS_ASSIGN_OR_RETURN(std::unique_ptr<HotRowCache> cache,
//                       HotRowCache::Create(options));
//   RowCacheMisses misses;
//   cache->Read(version, ids, absl::MakeSpan(rows), &misses);  // hits filled
//   ... pull misses.ids into misses.rows ...
//   cache->Complete(version, misses, absl::MakeSpan(rows));    // misses too
//
// Staleness: a read names the table version its rows must reflect (BSP:
// an exchange of step t with a push returns version t + 1, without one
// version t). A cached row of version v answers a read of version r when
// v + max_staleness >= r, so a row is reused for at most max_staleness
// steps before it is pulled again; max_staleness 0 answers nothing (every
// row pulled, as without a cache). Gradients are not cached: the caller
// pushes every row's gradient as before.
//
// Memory: at most capacity_bytes, accounted per row as its floats, its entry
// and its index slots (kRowCacheOverheadBytes); a row over the bound
// evicts the least recently used row (kLru) or the least frequently read,
// ties to the least recent (kLfu). Frequencies count reads while the row is
// cached: an evicted row starts again at 1.
//
// Not thread-safe: one trainer thread owns it.
#ifndef WORKER_CLIENT_HOT_ROW_CACHE_H_
#define WORKER_CLIENT_HOT_ROW_CACHE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/table_spec.h"  // kRowCacheOverheadBytes

namespace ps {

enum class RowCachePolicy { kLru, kLfu };

struct HotRowCacheOptions {
  uint32_t dim = 0;             // floats per row, >= 1
  uint64_t max_staleness = 0;   // steps a row may be reused
  uint64_t capacity_bytes = 0;  // at least one row's accounted bytes
  RowCachePolicy policy = RowCachePolicy::kLru;
};

struct HotRowCacheStats {
  uint64_t hits = 0;    // rows answered from the cache
  uint64_t misses = 0;  // rows left to pull (absent or too stale)
  uint64_t evictions = 0;
  // Wire bytes the hits saved: each pulled row costs its 8-byte id in the
  // request and its id and floats in the reply (framing not counted).
  uint64_t bytes_saved = 0;
  uint64_t rows = 0;        // rows cached now
  uint64_t bytes_used = 0;  // their accounted bytes
};

// The part of a read the cache could not answer.
struct RowCacheMisses {
  std::vector<uint64_t> ids;  // to pull, in read order
  std::vector<uint32_t> at;   // each one's position in the read
  std::vector<float> rows;    // ids.size() x dim: the pull writes them here
};

class HotRowCache {
 public:
  // kInvalidArgument naming the field for dim 0 or a capacity under one
  // row's accounted bytes.
  static absl::StatusOr<std::unique_ptr<HotRowCache>> Create(
      const HotRowCacheOptions& options);

  // Fills rows[i * dim ..] for every ids[i] cached fresh enough for
  // `version`, and lists the others in `misses` (cleared first; its rows
  // sized for them). rows.size() must be ids.size() x dim.
  void Read(uint64_t version, absl::Span<const uint64_t> ids,
            absl::Span<float> rows, RowCacheMisses* misses);
  // The misses of the last Read were pulled at `version`: copies them into
  // `rows` (the same read's) and caches them, evicting to stay in bounds.
  void Complete(uint64_t version, const RowCacheMisses& misses,
                absl::Span<float> rows);

  HotRowCacheStats stats() const;
  uint64_t capacity_rows() const { return capacity_rows_; }

 private:
  static constexpr uint32_t kNone = ~0u;
  struct Entry {
    uint64_t id = 0;
    uint64_t version = 0;
    uint64_t freq = 0;
    uint32_t prev = kNone, next = kNone;  // in its frequency's list
  };
  struct List {
    uint32_t head = kNone, tail = kNone;  // head = most recent
  };

  explicit HotRowCache(const HotRowCacheOptions& options);

  // A read of slot `s`: most recent in its list, one more read (kLfu).
  void Touch(uint32_t s);
  void Unlink(uint32_t s);
  void PushFront(uint32_t s);
  // A free slot for a new row, evicting one when full.
  uint32_t Allocate();
  float* RowOf(uint32_t s) { return rows_.data() + size_t{s} * dim_; }

  const uint32_t dim_;
  const uint64_t max_staleness_;
  const RowCachePolicy policy_;
  const uint64_t capacity_rows_;

  std::vector<Entry> entries_;
  std::vector<float> rows_;                        // entries_.size() x dim
  absl::flat_hash_map<uint64_t, uint32_t> index_;  // id -> slot
  // By frequency (kLru: everything at 1). min_freq_ has the victim's list.
  absl::flat_hash_map<uint64_t, List> lists_;
  uint64_t min_freq_ = 0;
  HotRowCacheStats stats_;
};

}  // namespace ps

#endif  // WORKER_CLIENT_HOT_ROW_CACHE_H_
