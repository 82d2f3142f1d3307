// The rows of one stripe: fixed-size records packed in slabs of 2^k records
// (one SlabPool block per slab, on huge pages where the OS allows; never an
// allocation per row), dense in slots [0, size()), with
// an intrusive least-recently-pushed list threaded through the records.
//
//   record = [values: dim floats][state: state_floats floats][pad to 8]
//            [id u64][last_step u64][pushes u64][newer u32][older u32]
//
// Removing a row moves the last row into its slot, so the slots stay dense,
// a freed slot is reused by the next row and a slab that empties is freed at
// once (bytes() goes down with evictions). Callers that index slots must
// follow the move Remove() reports.
//
// Copy on write (snapshots without a pause): Freeze() returns a RowCapture,
// the store as it is now, in O(1). From then on, before a record of a slot
// below the frozen size is first changed (values, metadata or LRU links,
// moved over by Remove, or its slab freed), its bytes are copied into the
// capture; FrozenRecord() reads the frozen image of a slot (the copy, or the
// live record when it did not change). So a snapshot costs no copy up front
// and its memory is the records changed while it is held, each once. One
// capture at a time; Release() ends it.
//
// Change tracking (incremental checkpoints), off until TrackChanges(): one
// dirty bit per slot, set when a row is created (Append) or pushed
// (MarkPush, Touch): one OR into a bitmap word (1 bit per row) per row
// update. A row moved by Remove takes its bit along; LRU relinks of
// neighbours and moves do not count as changes. TakeChanges() hands the
// bits over (slot order at that instant) and starts a clean interval.
// Not thread-safe: the stripe's mutex guards it (the capture included).
#ifndef SERVER_SPARSE_INTERNAL_ROW_STORE_H_
#define SERVER_SPARSE_INTERNAL_ROW_STORE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "server/sparse/internal/row_index.h"
#include "server/sparse/internal/slab_pool.h"

namespace ps {
namespace sparse_internal {

// The per-row metadata at the end of each record.
struct RowMeta {
  uint64_t id;
  uint64_t last_step;  // the highest step a push of this row carried
  uint64_t pushes;     // pushes counted for this id (see Stripe::Push)
  uint32_t newer;      // LRU neighbours (slots), kNil at the ends
  uint32_t older;
};

// The records of a RowStore at its Freeze(): see the file comment.
class RowCapture {
 public:
  uint32_t rows() const { return rows_; }      // size() at the freeze
  uint32_t oldest() const { return oldest_; }  // oldest() at the freeze
  // Records copied so far, and the bytes they and their index hold.
  size_t copied_rows() const { return index_.size(); }
  size_t bytes() const;

 private:
  friend class RowStore;
  static constexpr uint32_t kRecordsPerBlock = 64;
  uint32_t rows_ = 0;
  uint32_t oldest_ = 0;
  size_t record_bytes_ = 0;
  // slot -> copy number; copy k at blocks_[k / kRecordsPerBlock].
  absl::flat_hash_map<uint32_t, uint32_t> index_;
  std::vector<std::unique_ptr<char[]>> blocks_;
};

class RowStore {
 public:
  static constexpr uint32_t kNil = 0xFFFFFFFFu;

  // Record size for rows of `floats_per_row` floats.
  static size_t RecordBytes(uint32_t floats_per_row);

  RowStore(uint32_t floats_per_row, uint32_t slab_rows_log2);
  RowStore(const RowStore&) = delete;
  RowStore& operator=(const RowStore&) = delete;
  RowStore(RowStore&&) = default;
  RowStore& operator=(RowStore&&) = default;

  uint32_t size() const { return size_; }
  size_t record_bytes() const { return record_bytes_; }
  // Slab memory plus one pointer per slab.
  size_t bytes() const { return slabs_.size() * (slab_bytes_ + sizeof(void*)); }
  // bytes() once the store holds `rows` rows.
  size_t BytesFor(size_t rows) const;

  float* Values(uint32_t slot) {
    return reinterpret_cast<float*>(Record(slot));
  }
  const float* Values(uint32_t slot) const {
    return reinterpret_cast<const float*>(Record(slot));
  }
  const RowMeta& Meta(uint32_t slot) const { return *MetaPtr(slot); }

  // Prefetches the record of `slot` if it exists (a hint for batches):
  // every cache line it spans (a record need not start on a line).
  void Prefetch(uint32_t slot) const {
    if (slot >= size_) return;
    const uintptr_t r = reinterpret_cast<uintptr_t>(Record(slot));
    for (uintptr_t line = r & ~uintptr_t{63}; line < r + record_bytes_;
         line += 64) {
      PrefetchLine(reinterpret_cast<const void*>(line));
    }
  }

  // A new most-recently-pushed row with uninitialised floats and `pushes`
  // pushes counted; returns its slot (== size() before the call). May
  // allocate a slab.
  uint32_t Append(uint64_t id, uint64_t step, uint64_t pushes);
  // Marks a push at `step` (MarkPush) and makes the row the most recently
  // pushed.
  void Touch(uint32_t slot, uint64_t step);
  // Counts a push at `step`: ++pushes, last_step = max(last_step, step).
  // Alone (no relinking) for tables without LRU, where two random neighbour
  // accesses would be wasted.
  void MarkPush(uint32_t slot, uint64_t step) {
    RowMeta* m = MetaPtr(slot);
    ++m->pushes;
    if (step > m->last_step) m->last_step = step;
    if (track_) MarkChanged(slot);
  }

  // Starts (or keeps) change tracking, with every row clean.
  void TrackChanges();
  bool tracking() const { return track_; }
  // The dirty bits of slots [0, size()) (bit s % 64 of word s / 64), and a
  // clean interval from now on. Empty when not tracking.
  std::vector<uint64_t> TakeChanges();
  // Whether bit `slot` is set in `bits` (a TakeChanges() result).
  static bool Changed(const std::vector<uint64_t>& bits, uint32_t slot) {
    return (slot >> 6) < bits.size() && ((bits[slot >> 6] >> (slot & 63)) & 1);
  }

  // Restoring an increment: sets the push metadata of `slot` and, when
  // `newest`, makes it the most recently pushed row.
  void SetMeta(uint32_t slot, uint64_t last_step, uint64_t pushes, bool newest);

  uint32_t newest() const { return newest_; }  // kNil when empty
  uint32_t oldest() const { return oldest_; }

  // Removes the row in `slot` by moving the last row into it; returns the
  // moved row's old slot (== slot when it was the last row). Frees the last
  // slab when it empties.
  uint32_t Remove(uint32_t slot);
  void Clear();

  // Appends the records of slots [0, size()) to `out`: a snapshot whose LRU
  // links stay valid (see MetaAt).
  void CopyRecords(std::string* out) const;

  // Starts copy on write (file comment); null when a capture is already
  // held (the caller then copies, CopyRecords).
  std::shared_ptr<const RowCapture> Freeze();
  // Ends `capture` if it is this store's current one (no-op otherwise).
  void Release(const RowCapture* capture);
  // The record of `slot` (< capture.rows()) as it was at the freeze.
  // `capture` must be this store's current one.
  const char* FrozenRecord(const RowCapture& capture, uint32_t slot) const;
  // The metadata of slot `slot` in a CopyRecords() snapshot.
  static RowMeta MetaAt(const char* records, size_t record_bytes,
                        uint32_t slot);

 private:
  // Every write of a record goes through here (copy on write).
  char* Record(uint32_t slot) {
    if (capture_ != nullptr && slot < capture_->rows_) CopyBefore(slot);
    return slabs_[slot >> slab_log2_].get() +
           (slot & slab_mask_) * record_bytes_;
  }
  const char* Record(uint32_t slot) const {
    return slabs_[slot >> slab_log2_].get() +
           (slot & slab_mask_) * record_bytes_;
  }
  RowMeta* MetaPtr(uint32_t slot) {
    return reinterpret_cast<RowMeta*>(Record(slot) + meta_offset_);
  }
  const RowMeta* MetaPtr(uint32_t slot) const {
    return reinterpret_cast<const RowMeta*>(Record(slot) + meta_offset_);
  }
  void Unlink(uint32_t slot);
  void LinkNewest(uint32_t slot);
  // Copies the record of `slot` into the capture unless it already is.
  void CopyBefore(uint32_t slot);
  void MarkChanged(uint32_t slot) {
    if ((slot >> 6) >= changed_.size()) changed_.resize((slot >> 6) + 1, 0);
    changed_[slot >> 6] |= uint64_t{1} << (slot & 63);
  }

  size_t meta_offset_;
  size_t record_bytes_;
  uint32_t slab_log2_;
  uint32_t slab_mask_;
  size_t slab_bytes_;
  std::vector<Slab> slabs_;  // SlabPool blocks (huge pages)
  uint32_t size_ = 0;
  uint32_t newest_ = kNil;
  uint32_t oldest_ = kNil;
  std::shared_ptr<RowCapture> capture_;  // while a snapshot holds it
  bool track_ = false;
  std::vector<uint64_t> changed_;  // dirty bits while tracking
};

}  // namespace sparse_internal
}  // namespace ps

#endif  // SERVER_SPARSE_INTERNAL_ROW_STORE_H_
