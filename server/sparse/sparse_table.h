// A shard's sparse embedding table: 64-bit ids -> rows of `dim` floats plus
// opaque per-row optimizer state, created on demand (after an admission
// count), evicted by TTL and/or LRU under a memory budget, checkpointed
// exactly. Transport-free; the shard maps requests onto it.
//
//   SparseTable::Options o;
//   o.name = "user_emb"; o.dim = 16; o.state_floats_per_row = 16;
//   o.init = {RowInitializer::Kind::kNormal, 0, 0.01f, seed};
//   o.admission_count = 3; o.ttl_steps = 1000;
//   PS_ASSIGN_OR_RETURN(std::unique_ptr<SparseTable> t,
//   SparseTable::Create(o)); PS_RETURN_IF_ERROR(t->Pull(ids,
//   absl::MakeSpan(rows))); PS_RETURN_IF_ERROR(t->Push(ids, grads, step,
//   adagrad_update)); t->EvictExpired(step);
//
// Rows live in stripes chosen by a salted hash of the id (RowHash, not
// ShardForId's bits), each stripe with its own absl::Mutex: rows in slabs of
// fixed-size records (no allocation per row), an open-addressing id index and
// the admission counters (see internal/stripe.h). Pulls take stripe reader
// locks; pushes take writer locks one stripe at a time, except with a budget
// and no LRU, where a push holds the locks of every stripe it touches (in
// stripe order) so that a push that does not fit changes nothing.
//
// Memory budget: split evenly over the stripes (each keeps its share);
// with num_stripes = 1 LRU is exact over the table, otherwise per stripe
// (ids hash uniformly over stripes, so it approximates a global LRU).
//
// Thread-safety: every method is thread-safe. Save() copies one stripe at a
// time under its reader lock (a memcpy of its slabs), so a pull never waits
// for it and a push waits at most for one stripe's copy.
#ifndef SERVER_SPARSE_SPARSE_TABLE_H_
#define SERVER_SPARSE_SPARSE_TABLE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "server/sparse/byte_stream.h"
#include "server/sparse/internal/batch.h"
#include "server/sparse/internal/hot_ids.h"
#include "server/sparse/internal/stripe.h"
#include "server/sparse/row_initializer.h"

namespace ps {

class SparseTable {
 public:
  struct Options {
    std::string name;                   // for errors and stats; non-empty
    uint32_t dim = 0;                   // >= 1
    uint32_t state_floats_per_row = 0;  // optimizer state, zero-initialised
    RowInitializer init;
    uint64_t id_bound = 0;         // ids must be < id_bound; 0 = any 64-bit
    uint32_t admission_count = 1;  // pushes before a row is stored; >= 1
    uint64_t ttl_steps = 0;        // EvictExpired removes rows idle this long
    bool lru = false;              // evict least recently pushed over budget
    uint64_t memory_budget_bytes = 0;  // 0 = unbounded
    uint32_t num_stripes = 64;         // power of two in [1, 4096]
    uint32_t slab_rows = 512;          // rows per slab: power of two <= 2^20
    uint32_t hot_ids = 10;             // rows in Stats::hottest; <= 1024
  };

  struct Stats {
    uint64_t rows = 0;
    uint64_t pending_admission = 0;  // ids with a counter, not stored
    uint64_t bytes_used = 0;
    uint64_t budget_bytes = 0;
    uint64_t admissions = 0;  // rows created
    uint64_t ttl_evictions = 0;
    uint64_t lru_evictions = 0;
    uint64_t dropped = 0;  // lru: rows that could not fit even alone
    uint64_t rows_pulled = 0;
    uint64_t rows_pushed = 0;  // unique ids per push
    // The hot_ids stored rows with the most pushes (ties: lower id first),
    // hottest first, with exact counts: each row counts every push applied
    // to it plus the pushes its admission counter saw (admission_count
    // when it was admitted). Covers stored rows only: ids still waiting
    // for admission are not rows (they have < admission_count pushes), and
    // a row evicted (TTL or LRU) loses its count; if readmitted it starts
    // over. Counts survive Save/Restore.
    std::vector<HotId> hottest;
  };

  // update(row[dim], state[state_floats_per_row], summed grad[dim], id).
  using UpdateFn = sparse_internal::UpdateFn;

  // kInvalidArgument naming the field when `options` are bad.
  static absl::StatusOr<std::unique_ptr<SparseTable>> Create(Options options);

  const Options& options() const { return options_; }

  // out[i * dim, (i + 1) * dim) = row ids[i] (its initial value when not
  // stored). ids may repeat. Errors (nothing written): out.size() !=
  // ids.size() * dim, an id >= id_bound.
  absl::Status Pull(absl::Span<const uint64_t> ids, absl::Span<float> out);

  // Applies grads[i * dim, (i + 1) * dim) to row ids[i] at `step`. Duplicate
  // ids are summed (in first-occurrence order) and `update` runs once per
  // unique id, under that id's stripe lock (it must not call the table).
  // Everything is validated first; on an error nothing changed:
  //   kInvalidArgument: grads.size() != ids.size() * dim, an id >= id_bound,
  //     a NaN or infinite gradient;
  //   kResourceExhausted: a budget without lru that the push would exceed.
  absl::Status Push(absl::Span<const uint64_t> ids,
                    absl::Span<const float> grads, uint64_t step,
                    UpdateFn update);

  // Removes rows whose last push is >= ttl_steps before `now_step`; returns
  // how many. No-op when ttl_steps == 0. Locks one stripe at a time.
  size_t EvictExpired(uint64_t now_step);

  // Writes the rows, optimizer state, metadata and admission counters (see
  // sparse_table_checkpoint.cc for the format). Errors come from the sink.
  absl::Status Save(ByteSink& sink) const;

  // Save() in two parts, for a caller that must capture the table at one
  // instant (JobTables: while no apply runs) but not hold up pushes for
  // the encoding and the I/O. TakeSnapshot freezes every stripe (one at a
  // time under its lock; O(1) but for the admission counters, which are
  // copied): the rows are copied on write from then on, each row the first
  // time a push, an eviction or a new row changes it (a copy of its record,
  // plus ~14 bytes of index), so the snapshot's memory is the rows changed
  // while it is held. WriteSnapshot encodes stripe by stripe, a batch of
  // rows at a time under the stripe's reader lock (a push to that stripe
  // waits for one batch at most), releases each stripe's copies once its
  // section is written, and writes exactly what Save would have written at
  // the instant of TakeSnapshot. A second snapshot taken while one is held
  // copies its stripes instead (about bytes_used() of memory). Destroying
  // a Snapshot unwritten releases it. It must not outlive the table, and
  // Restore must not run while one is held.
  class Snapshot {
   public:
    Snapshot() = default;
    Snapshot(Snapshot&&) noexcept;
    Snapshot& operator=(Snapshot&&) noexcept;
    ~Snapshot();
    // Whether WriteSnapshot writes an increment (see TrackChanges).
    bool incremental() const { return incremental_; }
    // Whether every stripe is copy on write (none was copied up front).
    bool copy_on_write() const;
    // Bytes of rows copied so far (copy on write) or up front.
    uint64_t held_bytes() const;

   private:
    friend class SparseTable;
    void Release();
    const SparseTable* table_ = nullptr;
    bool incremental_ = false;
    std::vector<sparse_internal::StripeImage> stripes_;
  };
  Snapshot TakeSnapshot(bool incremental = false) const;
  absl::Status WriteSnapshot(Snapshot snapshot, ByteSink& sink) const;

  // Incremental checkpoints (sparse_table_increment.cc). From TrackChanges
  // on, the table records what changes between one TakeSnapshot and the
  // next: a dirty bit per row set when a push updates or creates it (one
  // OR into a bitmap word per row update), the ids removed (TTL, LRU) and
  // the admission counters changed. TakeSnapshot(true) then writes an
  // increment: only the rows changed since the previous TakeSnapshot (in
  // LRU order, so an LRU table's order is restored exactly), the ids
  // removed and the counters changed; ApplyIncrement applied to the table
  // as the previous snapshot wrote it gives the table as this one wrote it,
  // bit for bit. Every TakeSnapshot starts a new interval (a snapshot never
  // written leaves a gap: the caller's next one must be full). Without
  // tracking, and for the first snapshot after TrackChanges or Restore,
  // TakeSnapshot(true) takes a full one (Snapshot::incremental() says).
  // A row changed during a save belongs to the next increment.
  void TrackChanges();
  // Applies a WriteSnapshot stream to this table: an increment on top of
  // its rows, or a full stream that replaces them (as Restore). For a
  // table being restored that nothing else uses: on an error (kDataLoss
  // for a corrupt or truncated stream, kInvalidArgument for another
  // table's, kResourceExhausted over the budget) the table may be left
  // part-applied, and the caller discards it.
  //
  // `accept` (set): only an increment is taken, and a row or admission
  // counter whose id it refuses is kInvalidArgument naming the id (the
  // rows of a live re-placement, checked against the receiving shard).
  using IdFilter = std::function<bool(uint64_t id)>;
  absl::Status ApplyIncrement(ByteSource& source,
                              const IdFilter& accept = nullptr);

  // The rows and admission counters whose id `keep` accepts, as an
  // increment stream (no ids removed) that ApplyIncrement adds to another
  // table of the same options: values, optimizer state, push counts and
  // last steps bit for bit (a live re-placement's moving rows). Each stripe
  // is copied under its reader lock, so a table that pushes meanwhile is
  // not read at one instant (the caller pauses its pushes). Errors come
  // from the sink.
  absl::Status SaveRowsWhere(const IdFilter& keep, ByteSink& sink) const;

  // Replaces the contents with a Save() stream (same name, dim and
  // state_floats_per_row). kDataLoss on a corrupt or truncated stream,
  // kInvalidArgument on a mismatch, kResourceExhausted over the budget: the
  // table is unchanged on every error. Statistics are kept.
  absl::Status Restore(ByteSource& source);

  uint64_t bytes_used() const;
  // Takes each stripe's reader lock in turn. With hot_ids > 0 it also scans
  // that stripe's rows for the hottest (one cache line per row: about
  // rows / num_stripes lines under each lock; a pull never waits for it).
  Stats GetStats() const;

 private:
  struct LockedStripe {
    explicit LockedStripe(const sparse_internal::StripeConfig& c) : data(c) {}
    mutable absl::Mutex mu;
    sparse_internal::Stripe data ABSL_GUARDED_BY(mu);
    std::atomic<uint64_t> rows_pulled{0};
  };

  // A piece of a batch's run of rows in one stripe (rows [begin, end) of
  // the batch's stripe order), at most kSegmentRows long: the unit the
  // table pipelines its cache misses over (see Pipeline).
  struct Segment {
    uint32_t stripe, begin, end;
  };
  static constexpr uint32_t kSegmentRows = 32;
  // The segments of a batch whose stripe s holds rows [begin[s],
  // begin[s + 1]), in order.
  static std::vector<Segment> Segments(absl::Span<const uint32_t> begin);
  // apply(segment) for each segment in order, with the index buckets of
  // segment k + 2 and then the rows of segment k + 1 prefetched (each under
  // its stripe's reader lock when `lock`) before segment k is applied;
  // hash_at(r) is the hash of row r of the batch. apply takes its own locks.
  template <typename HashAt, typename Apply>
  void Pipeline(const std::vector<Segment>& segments, bool lock, HashAt hash_at,
                Apply apply) const;

  explicit SparseTable(Options options);
  // Writes stripe s's section of `image` (a capture's records read under
  // the stripe's reader lock, a batch of rows at a time).
  absl::Status EncodeStripe(size_t s, sparse_internal::StripeImage& image,
                            ByteSink& sink) const;
  sparse_internal::StripeConfig StripeConfigFor() const;
  uint32_t StripeOf(uint64_t hash) const {
    return static_cast<uint32_t>(hash) & stripe_mask_;
  }
  // Push with a budget and no lru: every touched stripe locked, checked,
  // then changed (or none).
  absl::Status PushAllOrNothing(const sparse_internal::MergedPush& m,
                                uint64_t step, UpdateFn update);
  // Stripe::Push of the rows of `seg`; the caller holds its writer lock.
  void PushSegment(const sparse_internal::MergedPush& m, const Segment& seg,
                   uint64_t step, UpdateFn update);
  // Restore's body: every section and the trailer into `staged`.
  absl::Status RestoreSections(
      ByteSource& source, uint32_t sections,
      std::vector<std::unique_ptr<sparse_internal::Stripe>>& staged) const;
  // Increments: the stream's header and trailer, reading one after its
  // magic, and the per-stripe budget check.
  std::string IncrementHeader() const;
  static std::string IncrementTrailer(uint64_t removed, uint64_t rows,
                                      uint64_t counters);
  absl::Status ApplyIncrementBody(ByteSource& source, const IdFilter& accept);
  absl::Status ApplyIncrementSection(ByteSource& source, uint32_t section,
                                     const IdFilter& accept, uint64_t* totals);
  absl::Status CheckBudget() const;
  absl::Status CheckStoredId(uint64_t id, absl::string_view where) const;
  absl::Status CheckId(uint64_t id, size_t index,
                       absl::string_view field) const;
  absl::Status Error(absl::StatusCode code, absl::string_view what) const;

  const Options options_;
  const uint32_t stripe_mask_;
  std::vector<std::unique_ptr<LockedStripe>> stripes_;
  // TrackChanges was called; the next snapshot must be full (after
  // TrackChanges or Restore). Written by TakeSnapshot, which is const.
  std::atomic<bool> tracking_{false};
  mutable std::atomic<bool> needs_full_{true};
};

}  // namespace ps

#endif  // SERVER_SPARSE_SPARSE_TABLE_H_
