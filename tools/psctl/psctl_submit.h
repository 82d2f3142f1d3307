// psctl submit: send a job spec to the coordinator; --dry-run validates and
// places it only, --wait follows the job until it ends.
#ifndef TOOLS_PSCTL_PSCTL_SUBMIT_H_
#define TOOLS_PSCTL_PSCTL_SUBMIT_H_

#include <ostream>

#include "tools/psctl/psctl_common.h"

namespace ps {
namespace psctl {

// `psctl submit JOB.pbtxt [--dry-run] [--wait] [--timeout=S]`. Blocks until
// the job ends with --wait. `interactive` draws the --wait progress as one
// rewritten line. Returns the exit code (tools/psctl/psctl.h).
int Submit(const Args& a, std::ostream& out, std::ostream& err,
           bool interactive);

}  // namespace psctl
}  // namespace ps

#endif  // TOOLS_PSCTL_PSCTL_SUBMIT_H_
