// psctl: the command-line client of the cluster.
//
//   psctl submit JOB.pbtxt [--dry-run] [--wait] [--timeout=SECONDS]
//   psctl status JOB [--json]
//   psctl list [--json]
//   psctl cancel JOB
//   psctl scale JOB --workers=N
//   psctl stats [--json] [--job=JOB] [--hot=N]
//   psctl export [JOB] [--from-checkpoint DIR] -o FILE.npz
//   common: --cluster=FILE | --coordinator=HOST:PORT, --help
//
// Exit codes: 0 success, 1 job failed or cancelled, 2 usage or validation
// error, 3 cluster unreachable (psctl::kExit* in tools/psctl/psctl_common.h).
//
// One file per command group: psctl_submit (submit, --dry-run, --wait),
// psctl_jobs (status, list, cancel, scale), psctl_stats (with psctl_tables, its
// sparse-table view), psctl_export (with npz_writer); psctl_common holds the
// flags, the connection and the exit codes.
#ifndef TOOLS_PSCTL_PSCTL_H_
#define TOOLS_PSCTL_PSCTL_H_

#include <ostream>
#include <string>
#include <vector>

namespace ps {

// Runs one psctl command. `args` excludes the program name. Output for the
// user goes to `out`, diagnostics to `err`. `interactive` draws the --wait
// progress as one rewritten line (a terminal) instead of periodic lines.
int RunPsctl(const std::vector<std::string>& args, std::ostream& out,
             std::ostream& err, bool interactive);

}  // namespace ps

#endif  // TOOLS_PSCTL_PSCTL_H_
