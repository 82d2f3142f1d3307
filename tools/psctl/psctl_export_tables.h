// psctl export's sparse tables: each table's rows (ids and values, without
// optimizer state) streamed from every shard into the .npz, never the
// whole table in memory:
//
//   tables/<name>/ids     uint64 [rows]
//   tables/<name>/values  float32 [rows, dim]   (row i is id i's)
//
// or, with --tables-dir DIR, one file per table and shard,
// DIR/<name>.shard<N>.npz holding "ids" and "values". Rows come in no
// particular order (each shard's, by stripe). The values array is
// streamed into the archive as rows arrive; the ids go to an unlinked
// spool file beside the output and are copied in after it, so memory is
// a few MiB whatever the table's size (core/npz_stream_writer.h).
#ifndef TOOLS_PSCTL_PSCTL_EXPORT_TABLES_H_
#define TOOLS_PSCTL_PSCTL_EXPORT_TABLES_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/npz_stream_writer.h"
#include "proto/job.pb.h"
#include "server/sparse/table_rows.h"
#include "tools/psctl/psctl_common.h"

namespace ps {
namespace psctl {

// Rows of `table` on `shard`, passed to `emit` in batches.
using RowSource =
    std::function<absl::Status(const std::string& table, uint32_t shard,
                               const TableRowsSink::EmitFn& emit)>;

// Rows per batch of a source (about 1 MiB of a dim-16 table).
inline constexpr size_t kExportBatchRows = 8192;

// A running or SUCCEEDED job's rows: the ExportRows stream of each shard
// (one call per table and shard, each with `timeout`).
RowSource ShardRowSource(const Connection& c, std::string job_id,
                         std::vector<std::string> addresses,
                         absl::Duration timeout);
// Stopped shards' rows: each shard's newest intact checkpoint of `job_id`
// in `dir`, restored for each table (server/table_export.h).
RowSource CheckpointRowSource(std::string dir, std::string job_id);

// What was exported, for the summary line.
struct TablesWritten {
  uint64_t rows = 0;
  uint64_t bytes = 0;  // of ids and values
};

// Every table of `spec` on shards [0, num_shards) into `w` as
// tables/<name>/{ids,values}. Errors name the table and shard.
absl::Status WriteTables(const JobSpec& spec, uint32_t num_shards,
                         const RowSource& source, NpzStreamWriter& w,
                         TablesWritten* written);

// The same into `dir` (which must not exist; it appears complete or not
// at all: written as "<dir>.tmp.<pid>" and renamed), one file per table and
// shard.
absl::Status WriteTablesDir(const JobSpec& spec, uint32_t num_shards,
                            const RowSource& source, const std::string& dir,
                            TablesWritten* written);

}  // namespace psctl
}  // namespace ps

#endif  // TOOLS_PSCTL_PSCTL_EXPORT_TABLES_H_
