// psctl submit: send a job spec to the coordinator; --dry-run validates and
// places it only, --wait follows the job until it ends.
#ifndef TOOLS_PSCTL_PSCTL_SUBMIT_H_
#define TOOLS_PSCTL_PSCTL_SUBMIT_H_

#include <ostream>
#include <string>

#include "tools/psctl/psctl_common.h"

namespace ps {
namespace psctl {

// `psctl submit JOB.pbtxt [--dry-run] [--wait] [--timeout=S]`. Blocks until
// the job ends with --wait. `interactive` draws the --wait progress as one
// rewritten line. Returns the exit code (tools/psctl/psctl.h).
int Submit(const Args& a, std::ostream& out, std::ostream& err,
           bool interactive);

// The `key=value` line that `submit --wait` ends with: job, state, the
// test metric of the job's kind (test_accuracy for a dense model; test_auc,
// test_logloss and teacher_auc for a ctr model), loss, steps, samples_per_s,
// data_s, compute_s, comm_s, overlap, train_s, wall_s and reason. A metric
// that Progress holds as -1 (not evaluated yet, no teacher) is left out.
std::string FormatSummary(const JobStatus& j);

}  // namespace psctl
}  // namespace ps

#endif  // TOOLS_PSCTL_PSCTL_SUBMIT_H_
