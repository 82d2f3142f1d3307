// The TableStats of a job's sparse tables (the Stats RPC, proto/ps.proto):
// the sparse side of server/internal/job_stats.h.
//
//   FillTableStats(tables, created, absl::Now(), &job_stats);
//
// Thread safety: as TableSet's const methods; any thread.
#ifndef SERVER_SPARSE_INTERNAL_TABLE_STATS_H_
#define SERVER_SPARSE_INTERNAL_TABLE_STATS_H_

#include "absl/time/time.h"
#include "proto/ps.pb.h"
#include "server/sparse/internal/table_set.h"

namespace ps {
namespace sparse_internal {

// Appends one TableStats per table to `out`; the rates are per second
// since `created` (the tables' creation), as of `now`.
void FillTableStats(const TableSet& tables, absl::Time created, absl::Time now,
                    JobStats* out);

}  // namespace sparse_internal
}  // namespace ps

#endif  // SERVER_SPARSE_INTERNAL_TABLE_STATS_H_
