// psctl stats: every shard's statistics, asked of all shards at once.
#ifndef TOOLS_PSCTL_PSCTL_STATS_H_
#define TOOLS_PSCTL_PSCTL_STATS_H_

#include <ostream>

#include "tools/psctl/psctl_common.h"

namespace ps {
namespace psctl {

// `psctl stats [--json] [--job=JOB] [--hot=N]`. Needs the cluster file (the
// shards' addresses). Blocks up to the connect timeout. Prints one line per
// shard, then, for jobs with sparse tables, one line per (job, table, shard)
// and the table's sum over shards (tools/psctl/psctl_tables.h), with the N
// hottest ids (default kDefaultHotIdsShown). Returns the exit code of the first
// shard that failed (tools/psctl/psctl.h), kExitOk when all answered;
// kExitUsage for a bad --hot.
int Stats(const Args& a, std::ostream& out, std::ostream& err);

}  // namespace psctl
}  // namespace ps

#endif  // TOOLS_PSCTL_PSCTL_STATS_H_
