// psctl stats: every shard's statistics, asked of all shards at once.
#ifndef TOOLS_PSCTL_STATS_H_
#define TOOLS_PSCTL_STATS_H_

#include <ostream>

#include "tools/psctl_common.h"

namespace ps {
namespace psctl {

// `psctl stats [--json] [--job=JOB]`. Needs the cluster file (the shards'
// addresses). Blocks up to the connect timeout. Returns the exit code of
// the first shard that failed (tools/psctl.h), kExitOk when all answered.
int Stats(const Args& a, std::ostream& out, std::ostream& err);

}  // namespace psctl
}  // namespace ps

#endif  // TOOLS_PSCTL_STATS_H_
