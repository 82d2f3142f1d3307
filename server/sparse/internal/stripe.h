// One stripe of a SparseTable: the rows whose RowHash falls in it (each with
// its exact push count), their index, the admission counters of its
// not-yet-stored ids and its counters. SparseTable owns one per stripe, each
// beside its own absl::Mutex; a Stripe itself is not thread-safe.
//
//   Stripe s(config);
//   s.Push(ids, hashes, summed_grads, step, update);   // unique ids
//   s.Read(id, hash, out);                              // false: not stored
//
// The LRU list is kept in push order only with config.lru (otherwise it
// stays in creation order, which is also the order Save writes rows in).
//
// Memory (bytes()): slabs + index + admission counters, exactly what they
// allocate. With a budget (config.budget_bytes, this stripe's share):
//   lru: before anything grows past the share the least recently pushed
//        rows are evicted; what cannot fit even with no rows left is dropped
//        (counted in `dropped`).
//   no lru: the caller checks BytesAfterPush() <= budget under the lock
//        before Push (so a push that does not fit changes nothing).
#ifndef SERVER_SPARSE_INTERNAL_STRIPE_H_
#define SERVER_SPARSE_INTERNAL_STRIPE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "server/sparse/internal/admission_counts.h"
#include "server/sparse/internal/hot_ids.h"
#include "server/sparse/internal/row_index.h"
#include "server/sparse/internal/row_store.h"
#include "server/sparse/row_initializer.h"

namespace ps {
namespace sparse_internal {

// update(row values, row state, summed gradient, id): the caller's optimizer.
using UpdateFn = absl::FunctionRef<void(float* row, float* state,
                                        const float* grad, uint64_t row_id)>;

struct StripeConfig {
  uint32_t dim = 0;
  uint32_t state_floats = 0;
  uint32_t admission_count = 1;
  bool lru = false;
  uint64_t budget_bytes = 0;  // this stripe's share; 0 = unbounded
  uint32_t slab_rows_log2 = 0;
  const RowInitializer* init = nullptr;  // borrowed; outlives the stripe
};

struct StripeCounters {
  uint64_t admissions = 0;  // rows created
  uint64_t ttl_evictions = 0;
  uint64_t lru_evictions = 0;
  uint64_t rows_pushed = 0;  // unique ids per push, stored or not
  uint64_t dropped = 0;      // lru only: pushes that could not fit at all
};

// A stripe's data at one instant, taken under its lock, encoded after it:
// either a copy of its records, or (Stripe::Freeze) a copy-on-write capture
// of them, read through Stripe::FrozenRecord under the stripe's lock.
// With `changes` (Stripe::Freeze of a tracking stripe asked for them) it
// holds only what changed since the previous Freeze: `changed` marks the
// rows (RowStore::Changed, slot order of the image), `removed` the ids
// removed meanwhile (in order; some may be back as rows) and `counters`
// the admission counters that changed, each with its count now (0: gone).
struct StripeImage {
  std::string records;  // RowStore records, slot order (without capture)
  std::shared_ptr<const RowCapture> capture;
  uint32_t rows = 0;
  uint32_t oldest = RowStore::kNil;  // follow RowMeta::newer from here
  std::vector<std::pair<uint64_t, uint32_t>> counters;  // admission
  bool changes = false;
  std::vector<uint64_t> changed;  // dirty bits, with `changes`
  uint32_t changed_rows = 0;      // bits set in `changed`
  std::vector<uint64_t> removed;  // with `changes`
};

class Stripe {
 public:
  explicit Stripe(const StripeConfig& config);

  size_t bytes() const {
    return store_.bytes() + index_.bytes() + admission_.bytes();
  }
  uint32_t rows() const { return store_.size(); }
  size_t pending() const { return admission_.size(); }
  const StripeCounters& counters() const { return counters_; }
  // Offers every row's (id, pushes) to `top`: one pass over the slabs,
  // O(rows) (a cache line per row, read in slot order).
  void OfferHottest(TopHotIds* top) const;

  // Copies the stored values of `id` into out[0, dim); false if not stored.
  bool Read(uint64_t id, uint64_t hash, float* out) const;

  // Read() for ids[order[k]], k in [0, n), into out + order[k] * dim;
  // appends the positions not stored to `missing`. (The caller prefetches:
  // PrefetchIndex, PrefetchRows.)
  void ReadMany(const uint64_t* ids, const uint64_t* hashes,
                const uint32_t* order, size_t n, float* out,
                std::vector<uint32_t>* missing) const;

  // Latency hiding for batches, hints only (they change nothing and never
  // stand in for a lookup). PrefetchIndex starts the loads of the index
  // buckets of hash_at(k), k in [0, n); PrefetchRows, issued once those
  // have arrived, reads the buckets and starts the loads of the records
  // they probably name. SparseTable runs them over a batch's later rows
  // (across stripes) while it applies the earlier ones, so a batch's cache
  // misses overlap instead of costing one after the other.
  template <typename HashAt>
  void PrefetchIndex(size_t n, HashAt hash_at) const {
    for (size_t k = 0; k < n; ++k) index_.Prefetch(hash_at(k));
  }
  template <typename HashAt>
  void PrefetchRows(size_t n, HashAt hash_at) const {
    for (size_t k = 0; k < n; ++k) {
      const int64_t slot = index_.GuessSlot(hash_at(k));
      if (slot >= 0) store_.Prefetch(static_cast<uint32_t>(slot));
    }
  }

  // An upper bound of bytes() after Push(ids, ...): ids unique.
  size_t BytesAfterPush(absl::Span<const uint64_t> ids,
                        absl::Span<const uint64_t> hashes) const;

  // Applies one push of unique `ids` (hashes[i] = RowHash(ids[i])) with
  // summed gradients grads[i * dim, (i + 1) * dim). Each stored row counts
  // the push (RowMeta::pushes); a row created by it starts at the pushes
  // its admission counter saw, this one included (1 without admission).
  void Push(absl::Span<const uint64_t> ids, absl::Span<const uint64_t> hashes,
            const float* grads, uint64_t step, UpdateFn update);

  // Removes rows with now_step - last_step >= ttl; returns how many.
  size_t EvictExpired(uint64_t now_step, uint64_t ttl);

  // The stripe now, copied (records and admission counters).
  void Snapshot(StripeImage* image) const;
  // The same with the records captured copy on write instead of copied
  // (RowStore::Freeze), when no other capture is held; else as Snapshot.
  // While tracking it starts a new interval of changes; with `changes`
  // the image holds only the previous interval's (see StripeImage).
  void Freeze(StripeImage* image, bool changes = false);

  // Change tracking for incremental checkpoints (RowStore::TrackChanges,
  // plus the ids removed and the admission counters changed). Off until
  // called; kept by SwapData, which starts a clean interval.
  void TrackChanges();
  bool tracking() const { return store_.tracking(); }
  // The frozen record of `slot` of an image Freeze took, which must still
  // be held (not released).
  const char* FrozenRecord(const RowCapture& capture, uint32_t slot) const {
    return store_.FrozenRecord(capture, slot);
  }
  // Ends the copy on write of `capture` (no-op if it is not this stripe's).
  void Release(const RowCapture* capture) { store_.Release(capture); }

  // Restore: add a row as the newest (values_and_state: dim + state_floats
  // floats) or an admission counter. kDataLoss on a duplicate id, a row
  // with 0 pushes or a counter of 0.
  absl::Status RestoreRow(uint64_t id, uint64_t last_step, uint64_t pushes,
                          const float* values_and_state);
  absl::Status RestoreCounter(uint64_t id, uint32_t count);

  // Applying an increment (rows in the order they are written): the row
  // `id` gets these values and metadata, as the newest with lru (an
  // existing row keeps its place without); `id` removed if stored; the
  // admission counter of `id` set (0: erased).
  void UpsertRow(uint64_t id, uint64_t last_step, uint64_t pushes,
                 const float* values_and_state);
  void RemoveId(uint64_t id);
  void SetCounter(uint64_t id, uint32_t count);

  // Exchanges the rows (with their push counts), index and admission
  // counters, not the StripeCounters, with `other`.
  void SwapData(Stripe& other);

 private:
  int64_t Find(uint64_t id, uint64_t hash) const;
  // Snapshot with `capture` (null: the records copied).
  void Snapshot(StripeImage* image,
                std::shared_ptr<const RowCapture> capture) const;
  void RemoveRow(uint32_t slot);
  // Tracking: the admission counter of `id` changed.
  void CounterChanged(uint64_t id) {
    if (store_.tracking()) counters_changed_.insert(id);
  }
  // Budget with lru: evict the least recently pushed rows until one more row
  // (counter) fits; false when it cannot fit even with no rows left.
  bool RoomForRow();
  bool RoomForCounter();

  StripeConfig config_;
  RowStore store_;
  RowIndex index_;
  AdmissionCounts admission_;
  StripeCounters counters_;
  // Tracking: since the last Freeze.
  std::vector<uint64_t> removed_;
  absl::flat_hash_set<uint64_t> counters_changed_;
};

}  // namespace sparse_internal
}  // namespace ps

#endif  // SERVER_SPARSE_INTERNAL_STRIPE_H_
