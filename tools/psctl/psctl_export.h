// psctl export: a job's dense parameters as an .npz file (numpy), by tensor
// name and shape, with the job's spec as JSON under "__job_spec__":
//
//   psctl export JOB -o model.npz              (a running or SUCCEEDED job)
//   psctl export [JOB] --from-checkpoint DIR -o model.npz (stopped shards)
//
// A running or SUCCEEDED job's chunks are pulled from the shards (while the
// coordinator keeps it there, PsdConfig.succeeded_jobs_kept; in the job's wire
// format: exact for FP32 jobs); --from-checkpoint reads each shard's newest
// intact checkpoint in DIR (server/checkpoint.h), exactly. A job's sparse
// tables' rows are streamed in as tables/<name>/ids and tables/<name>/values
// (or, with --tables-dir DIR, one .npz per table and shard in DIR; see
// psctl_export_tables.h). The file appears complete or not at all
// (core/npz_stream_writer.h).
#ifndef TOOLS_PSCTL_PSCTL_EXPORT_H_
#define TOOLS_PSCTL_PSCTL_EXPORT_H_

#include <cstdint>
#include <map>
#include <ostream>
#include <vector>

#include "absl/status/statusor.h"
#include "core/npz_writer.h"
#include "proto/job.pb.h"
#include "tools/psctl/psctl_common.h"

namespace ps {
namespace psctl {

// Exit codes as in psctl.h: 2 for an unknown job, a job not on the shards,
// an unwritable output or an unusable checkpoint directory.
int Export(const Args& a, std::ostream& out, std::ostream& err);

// The tensors of `spec`, in spec order, from their chunks' values by
// chunk id. kInvalidArgument naming the tensor when a chunk is missing or
// has another length than `placement` says.
absl::StatusOr<std::vector<NpyArray>> AssembleTensors(
    const JobSpec& spec, const Placement& placement,
    const std::map<uint32_t, std::vector<float>>& chunks);

}  // namespace psctl
}  // namespace ps

#endif  // TOOLS_PSCTL_PSCTL_EXPORT_H_
