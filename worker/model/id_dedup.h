// Per-batch de-duplication of 64-bit embedding ids: the host side of an
// embedding-bag step. A batch's ids (one per (example, field) for
// single-valued fields, or bags of any size given by offsets) become
//   unique_ids       the distinct ids in first-occurrence order (what the
//                    worker pulls from the shards, and pushes gradients for);
//   indices          per occurrence, its position in unique_ids;
//   offsets          the bags over the occurrences (0, 1, ..., n when
//                    single-valued);
//   row_offsets /    per unique id, the ascending list of its occurrences
//   row_occurrences  (CSR), for the deterministic EmbeddingBagBackward.
// Everything is a deterministic function of the input.
//
//   IdDedup dedup;
//   PS_RETURN_IF_ERROR(dedup.DedupSingle(ids));  // B x F ids, row-major
//   Pull(dedup.unique_ids());                     // rows, in that order
//   EmbeddingBatch batch = dedup.batch();         // host pointers; copy the
//                                                 // arrays for a device
//   backend->EmbeddingBagForward(Pooling::kSum, batch, dim, rows,
//                                /*bags_per_row=*/F, out_stride, out);
//
// Cost: one open-addressing hash probe per id plus two linear passes. The
// table and every output keep their memory across batches, so a stream of
// batches no larger than the biggest seen so far allocates nothing.
//
// Thread-compatible: one thread at a time; the views returned stay valid
// until the next successful Dedup call or the object's destruction.

#ifndef WORKER_MODEL_ID_DEDUP_H_
#define WORKER_MODEL_ID_DEDUP_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "worker/backend/backend.h"

namespace ps {

class IdDedup {
 public:
  IdDedup() = default;
  IdDedup(const IdDedup&) = delete;
  IdDedup& operator=(const IdDedup&) = delete;

  // Single-valued fields: occurrence i is bag i (for B x F ids stored
  // row-major, bag b * F + f). kInvalidArgument when ids has more than
  // INT32_MAX elements; the previous batch's results are then kept.
  absl::Status DedupSingle(absl::Span<const uint64_t> ids);

  // Bags of any size: bag b holds ids[offsets[b] .. offsets[b + 1]).
  // offsets needs num_bags + 1 >= 1 elements, offsets[0] == 0,
  // non-decreasing, offsets.back() == ids.size(). kInvalidArgument naming
  // the first bad element otherwise, with the previous results kept.
  absl::Status DedupBags(absl::Span<const uint64_t> ids,
                         absl::Span<const int32_t> offsets);

  absl::Span<const uint64_t> unique_ids() const { return unique_ids_; }
  absl::Span<const int32_t> indices() const { return indices_; }
  absl::Span<const int32_t> offsets() const { return offsets_; }
  absl::Span<const int32_t> row_offsets() const { return row_offsets_; }
  absl::Span<const int32_t> row_occurrences() const { return row_occurrences_; }
  int num_bags() const { return static_cast<int>(offsets_.size()) - 1; }
  int num_unique() const { return static_cast<int>(unique_ids_.size()); }
  int num_indices() const { return static_cast<int>(indices_.size()); }

  // The batch over this object's host arrays, for a backend with
  // host_memory() (or to size device copies).
  EmbeddingBatch batch() const;

  // Slots in the hash table now (for tests of memory reuse).
  size_t table_capacity() const { return slots_.size(); }

 private:
  struct Slot {
    uint64_t key;
    int32_t value;   // position in unique_ids_
    uint32_t epoch;  // the slot is empty unless epoch == epoch_
  };

  // Readies the table for n ids: grows it to keep the load <= 1/2, and
  // empties it by moving to a new epoch.
  void StartBatch(size_t n);
  // The unique position of `id`, inserting it (first occurrence) if new.
  int32_t Intern(uint64_t id);
  // Fills indices_, unique_ids_ and the row CSR from ids.
  void Build(absl::Span<const uint64_t> ids);

  std::vector<Slot> slots_;  // power-of-two size, or empty
  int shift_ = 64;           // 64 - log2(slots_.size())
  uint32_t epoch_ = 0;

  std::vector<uint64_t> unique_ids_;
  std::vector<int32_t> indices_;
  std::vector<int32_t> offsets_ = {0};
  std::vector<int32_t> row_offsets_ = {0};
  std::vector<int32_t> row_occurrences_;
  std::vector<int32_t> cursor_;  // scratch for the CSR fill
};

}  // namespace ps

#endif  // WORKER_MODEL_ID_DEDUP_H_
