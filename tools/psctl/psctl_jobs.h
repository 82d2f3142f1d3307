// psctl status, list, cancel and scale: one coordinator call each.
#ifndef TOOLS_PSCTL_PSCTL_JOBS_H_
#define TOOLS_PSCTL_PSCTL_JOBS_H_

#include <ostream>

#include "tools/psctl/psctl_common.h"

namespace ps {
namespace psctl {

// Each blocks for one call (up to the connect timeout) and returns the exit
// code (tools/psctl/psctl.h).
// `psctl status JOB [--json]`: one job's state and progress.
int Status(const Args& a, std::ostream& out, std::ostream& err);
// `psctl list [--json]`: every job the coordinator knows.
int List(const Args& a, std::ostream& out, std::ostream& err);
// `psctl cancel JOB`: cancels a pending or running job.
int Cancel(const Args& a, std::ostream& out, std::ostream& err);
// `psctl scale JOB --workers=N`: grows or shrinks a running job's workers
// (ScaleJobRequest); prints the scale's progress.
int Scale(const Args& a, std::ostream& out, std::ostream& err);
// "scale: 2 -> 4 workers, 3 active (in progress)": the line status prints
// for a job that was scaled; "" for one that never was.
std::string FormatScale(const ScaleStatus& s);
// "shards: 2 -> 3, done; 7 chunks (1.2 MB) move at step 120 (placement
// epoch 1, reached 0.31 s after the command, paused 12.0 ms)"; "" when the
// job was never re-placed.
std::string FormatReshard(const ReshardStatus& s);
// "data: epoch 3 from step 512 over ranks 0, 1, 2 (0 examples of it read
// before)": an elastic data job's current data segment; "" for a job
// without a data plan.
std::string FormatDataPlan(const DataPlan& plan);

}  // namespace psctl
}  // namespace ps

#endif  // TOOLS_PSCTL_PSCTL_JOBS_H_
