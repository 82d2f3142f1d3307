// A job's sparse tables on one shard (JobSpec.tables): each table's spec,
// per-row optimizer and rows, built from the spec, and what is done to all
// of them at once: applying a step's pushes, TTL eviction, snapshots and
// their streams. The consistency rules that decide when to apply live in
// step_barrier.h; JobTables (server/sparse/job_tables.h) is the client.
//
//   PS_ASSIGN_OR_RETURN(std::unique_ptr<TableSet> tables,
//                       TableSet::Create(spec));
//   PS_RETURN_IF_ERROR(tables->Apply({&pushes}, 1.0f, step));
//
// Thread safety: Apply, EvictExpired and the const methods may run
// concurrently (each table locks its own stripes). Replace must not run
// concurrently with any other call; the caller orders Apply against
// TakeSnapshots when the copy must hold no half-applied push.
#ifndef SERVER_SPARSE_INTERNAL_TABLE_SET_H_
#define SERVER_SPARSE_INTERNAL_TABLE_SET_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "server/sparse/byte_stream.h"
#include "server/sparse/row_optimizer.h"
#include "server/sparse/sparse_table.h"

namespace ps {
namespace sparse_internal {

// One worker's pushed rows for one step, per table index.
struct TablePushes {
  std::vector<std::vector<uint64_t>> ids;
  std::vector<std::vector<float>> grads;
  uint64_t bytes = 0;
};

// One table: its spec (defaults applied), optimizer and rows.
struct Table {
  TableSpec spec;
  std::unique_ptr<RowOptimizer> optimizer;
  std::unique_ptr<SparseTable> rows;
  SparseTable::Options options;
};

class TableSet {
 public:
  // The tables of `spec` (defaults applied, core/table_spec.h), in spec
  // order. INVALID_ARGUMENT naming the field for a bad table spec or a
  // name used twice.
  static absl::StatusOr<std::unique_ptr<TableSet>> Create(const JobSpec& spec);

  size_t size() const { return tables_.size(); }
  const Table& at(size_t k) const { return *tables_[k]; }
  // The table named `name`, or null.
  const Table* Find(const std::string& name) const;
  // The index of the table named `name`, which must exist.
  size_t IndexOf(const std::string& name) const { return index_.at(name); }

  // The pushes' rows, concatenated in order (a row pushed several times is
  // summed in that order), times `scale`, into every table, tagged `step`
  // for TTL. An error (a table's memory budget) leaves that table as it
  // was.
  absl::Status Apply(const std::vector<const TablePushes*>& pushes, float scale,
                     uint64_t step);
  // TTL: drops rows idle evict_after_steps at step `now`, scanning a table
  // every evict_after_steps / 16 steps (so within 1/16 more).
  void EvictExpired(uint64_t now);

  // Bytes of every table (rows, state, index, admission counters).
  uint64_t bytes_used() const;

  // Every table's copy (SparseTable::TakeSnapshot), in table order;
  // `incremental`: increments where the table can (see TrackChanges).
  std::vector<SparseTable::Snapshot> TakeSnapshots(
      bool incremental = false) const;
  // SparseTable::TrackChanges on every table (and on those Replace swaps
  // in from then on).
  void TrackChanges();
  // Writes the copies TakeSnapshots made, one SparseTable stream each.
  absl::Status WriteSnapshots(std::vector<SparseTable::Snapshot> snapshots,
                              ByteSink& sink) const;
  // Reads one SparseTable stream per table into fresh tables, for Replace;
  // an error leaves nothing changed.
  absl::StatusOr<std::vector<std::unique_ptr<SparseTable>>> ReadTables(
      ByteSource& source) const;
  // Applies one SparseTable stream per table (an increment, or a full
  // stream) to tables ReadTables read; an error leaves them part-applied
  // (discard them). `accept` (set): increments only, each id checked
  // (SparseTable::ApplyIncrement).
  absl::Status ApplyIncrements(
      std::vector<std::unique_ptr<SparseTable>>& restored, ByteSource& source,
      const SparseTable::IdFilter& accept = nullptr) const;
  // Fresh empty tables, one per table, for Replace.
  absl::StatusOr<std::vector<std::unique_ptr<SparseTable>>> Empty() const;
  // One SparseTable::SaveRowsWhere stream per table, in order.
  absl::Status SaveRowsWhere(const SparseTable::IdFilter& keep,
                             ByteSink& sink) const;
  // Swaps in the rows ReadTables read (one per table, in order).
  void Replace(std::vector<std::unique_ptr<SparseTable>> rows);

 private:
  TableSet() = default;

  std::vector<std::unique_ptr<Table>> tables_;
  absl::flat_hash_map<std::string, size_t> index_;
  bool tracking_ = false;
};

}  // namespace sparse_internal
}  // namespace ps

#endif  // SERVER_SPARSE_INTERNAL_TABLE_SET_H_
