// psctl trace: a step timeline of a running job (see tools/psctl/trace_json.h).
//
//   psctl trace JOB --steps=A:B -o trace.json [--timeout=SECONDS]
//
// Asks every shard (SetTrace) and the coordinator (StartTrace) to trace
// steps [A, B), waits until every worker uploaded its spans (or the job
// ended, or --timeout passed: default 600 s), collects the shards' spans
// and writes one Trace Event Format file. Exit 1 for an unknown or ended
// job, an empty or too long range, or nothing recorded; 2 for usage errors.
#ifndef TOOLS_PSCTL_PSCTL_TRACE_H_
#define TOOLS_PSCTL_PSCTL_TRACE_H_

#include <ostream>

#include "tools/psctl/psctl_common.h"

namespace ps {
namespace psctl {

int Trace(const Args& a, std::ostream& out, std::ostream& err);

}  // namespace psctl
}  // namespace ps

#endif  // TOOLS_PSCTL_PSCTL_TRACE_H_
