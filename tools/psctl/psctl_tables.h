// psctl stats' view of sparse tables (JobSpec.tables): per job, per table
// and per shard, the rows, bytes used against the budget, admissions,
// evictions, pull/push rates and hottest ids, with a row that sums the
// shards. A pure function of the shards' answers, so it is tested without a
// cluster.
//
//   std::vector<const ShardStats*> answered = ...;  // the shards that answered
//   out << FormatTableStats(answered, TableViewOptions{.hot_ids = 5});
//
// Jobs without tables print nothing: `psctl stats` stays as it was for them.
#ifndef TOOLS_PSCTL_PSCTL_TABLES_H_
#define TOOLS_PSCTL_PSCTL_TABLES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/ps.pb.h"

namespace ps {
namespace psctl {

// Hottest ids shown per row unless --hot says otherwise.
inline constexpr uint32_t kDefaultHotIdsShown = 3;

struct TableViewOptions {
  // Hottest ids per row (0: the column is left out). A shard reports at
  // most its table's TableSpec.hot_ids (default 10), so a larger value
  // shows what there is.
  uint32_t hot_ids = kDefaultHotIdsShown;
};

// The value of --hot: a whole number in [0, kMaxTableHotIds]; `def` when
// the flag is absent or empty. kInvalidArgument naming --hot otherwise.
absl::StatusOr<uint32_t> ParseHotIds(const std::string& value, uint32_t def);

// The table section of `psctl stats`: a heading and one line per (job,
// table, shard) in job-id order, then the tables' spec order, then shard
// order; a line with SHARD "all" follows each table held by more than one
// shard. "" when no job in `shards` has tables. `shards` holds only the
// shards that answered (none may be null); the sums are over them.
std::string FormatTableStats(const std::vector<const ShardStats*>& shards,
                             const TableViewOptions& options);

}  // namespace psctl
}  // namespace ps

#endif  // TOOLS_PSCTL_PSCTL_TABLES_H_
