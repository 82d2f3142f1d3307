// The stream JobTables::Save writes and Restore reads, but for the tables'
// own streams that follow it (SparseTable::Save). Integers and floats
// little-endian (server/internal/le_bytes.h):
//
//   magic "PSJT", format u32 (1: full; 2: an increment, whose tables'
//   streams may be SparseTable increments on the previous snapshot's),
//   version u64, workers u32, tables u32,
//   pushed_steps (count u64, then that many u64),
//   per worker: has_push u8, and if 1, per table:
//     ids (count u64, u64s), gradients (count u64, f32s)
//   then one SparseTable stream per table, in table order.
//
// Stateless; any thread.
#ifndef SERVER_SPARSE_INTERNAL_TABLES_STREAM_H_
#define SERVER_SPARSE_INTERNAL_TABLES_STREAM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/sparse/byte_stream.h"
#include "server/sparse/internal/step_barrier.h"
#include "server/sparse/internal/table_set.h"

namespace ps {
namespace sparse_internal {

// Writes `state` of a job with `num_workers` workers and `num_tables`
// tables.
// tables (`increment`: format 2).
absl::Status WriteBarrierState(const StepBarrier::State& state,
                               uint32_t num_workers, uint32_t num_tables,
                               ByteSink& sink, bool increment = false);

// Reads what WriteBarrierState wrote, for a job with `num_workers` workers
// and `tables`: DATA_LOSS for a stream that is not one or is corrupt,
// INVALID_ARGUMENT for one of another number of workers or tables. An
// increment's stream is DATA_LOSS unless `increment` is given (it is set
// to whether the stream is one).
absl::StatusOr<StepBarrier::State> ReadBarrierState(ByteSource& source,
                                                    uint32_t num_workers,
                                                    const TableSet& tables,
                                                    bool* increment = nullptr);

}  // namespace sparse_internal
}  // namespace ps

#endif  // SERVER_SPARSE_INTERNAL_TABLES_STREAM_H_
