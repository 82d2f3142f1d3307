// psctl curves: each job's training curve (the leader's loss, accuracy and
// samples/s by step, Coordinator.GetHistory) as CSV, or drawn by
// tools/plot/plot_curves.py (embedded; python3-matplotlib), several jobs on one
// chart:
//
//   psctl curves job-000001 job-000002 -o curves.png
//   psctl curves job-000001 -o curves.csv
#ifndef TOOLS_PSCTL_PSCTL_CURVES_H_
#define TOOLS_PSCTL_PSCTL_CURVES_H_

#include <ostream>
#include <string>
#include <vector>

#include "proto/coordinator.pb.h"
#include "tools/psctl/psctl_common.h"

namespace ps {
namespace psctl {

// `psctl curves JOB [JOB...] -o FILE` (.csv, else a chart: .png, .svg,
// .pdf). Blocks for one GetJob and one GetHistory per job, then for the
// plot script. Exit 1 for an unknown job or a job without points, 2 for
// usage, 3 when the coordinator is unreachable.
int Curves(const Args& a, std::ostream& out, std::ostream& err);

// One job's curve for WriteCurvesCsv.
struct JobCurve {
  std::string job_id;
  std::string name;
  std::vector<Progress> points;
};

// The CSV tools/plot/plot_curves.py reads: a header, then one row per point,
// job by job. Names are written without commas, quotes or line breaks.
void WriteCurvesCsv(const std::vector<JobCurve>& curves, std::ostream& out);

}  // namespace psctl
}  // namespace ps

#endif  // TOOLS_PSCTL_PSCTL_CURVES_H_
