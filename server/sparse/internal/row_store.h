// The rows of one stripe: fixed-size records packed in slabs of 2^k records
// (one allocation per slab, never per row), dense in slots [0, size()), with
// an intrusive least-recently-pushed list threaded through the records.
//
//   record = [values: dim floats][state: state_floats floats][pad to 8]
//            [id u64][last_step u64][pushes u64][newer u32][older u32]
//
// Removing a row moves the last row into its slot, so the slots stay dense,
// a freed slot is reused by the next row and a slab that empties is freed at
// once (bytes() goes down with evictions). Callers that index slots must
// follow the move Remove() reports.
// Not thread-safe: the stripe's mutex guards it.
#ifndef SERVER_SPARSE_INTERNAL_ROW_STORE_H_
#define SERVER_SPARSE_INTERNAL_ROW_STORE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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

  // Prefetches the record of `slot` if it exists (a hint for batches).
  void Prefetch(uint32_t slot) const {
    if (slot >= size_) return;
    const char* r = Record(slot);
    for (size_t off = 0; off < record_bytes_; off += 64) {
      __builtin_prefetch(r + off);
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
  }

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
  // The metadata of slot `slot` in a CopyRecords() snapshot.
  static RowMeta MetaAt(const char* records, size_t record_bytes,
                        uint32_t slot);

 private:
  char* Record(uint32_t slot) {
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

  size_t meta_offset_;
  size_t record_bytes_;
  uint32_t slab_log2_;
  uint32_t slab_mask_;
  size_t slab_bytes_;
  std::vector<std::unique_ptr<char[]>> slabs_;
  uint32_t size_ = 0;
  uint32_t newest_ = kNil;
  uint32_t oldest_ = kNil;
};

}  // namespace sparse_internal
}  // namespace ps

#endif  // SERVER_SPARSE_INTERNAL_ROW_STORE_H_
