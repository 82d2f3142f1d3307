// The coordinator's side of warm starts (JobSpec.init, docs/OPERATIONS.md
// "Warm start"): at submit, the source is checked tensor by tensor against
// the job, so that a job that cannot start from it is refused then, naming
// the tensor, the field and the file or job. The shards copy the values
// when the job starts (server/internal/warm_start.h).
//
//   PS_RETURN_IF_ERROR(CheckFromFile(spec));                   // no lock
//   PS_RETURN_IF_ERROR(ResolveFromJob(jobs, kept, &spec, &placement));
#ifndef SERVER_COORDINATOR_WARM_START_H_
#define SERVER_COORDINATOR_WARM_START_H_

#include <cstdint>

#include "absl/status/status.h"
#include "proto/job.pb.h"
#include "server/coordinator/job_table.h"

namespace ps {

// init.from_file: the file reads as an .npz holding every tensor of `spec`
// (normalized: tensors filled) with its shape. INVALID_ARGUMENT starting
// "init.from_file: " and naming the file (and the tensor) otherwise; OK
// when init has no from_file. Reads the whole file; call it without locks.
absl::Status CheckFromFile(const JobSpec& spec);

// init.from_job: finds the source (an id, or the newest SUCCEEDED job of
// that name) in `jobs`, which must have SUCCEEDED and still be among the
// `kept` newest that did (PsdConfig.succeeded_jobs_kept), without replicas
// (its replication at most 1: a failover may have left an older copy where
// its placement names a chunk's shard), with the same
// tensors (names and shapes), partition_bytes and, for optimizer_state,
// optimizer kind. Then writes its id into spec->init.from_job and gives
// `placement` the source's, so that each shard finds every chunk it needs
// in its own copy of the source, and `spec` the source's shards and
// shard_ids (where a move may have left its chunks). With `spec`'s
// replication k > 1, each chunk keeps its source's shard as its primary and
// gets k - 1 backups on the ring of those shards (PlaceChunks' rule); the
// primaries forward their copies to them (server/internal/warm_start.h);
// "replication: " when the source's shards are fewer than k. INVALID_ARGUMENT
// starting "init.from_job: " and naming the job (and the tensor) otherwise,
// or "shards: " when `spec` asked for other shards; OK when init has no
// from_job.
absl::Status ResolveFromJob(JobTable& jobs, uint32_t kept, JobSpec* spec,
                            Placement* placement);

}  // namespace ps

#endif  // SERVER_COORDINATOR_WARM_START_H_
