// Warm starts (JobSpec.init): a new job's chunks take their initial values
// from an .npz file or from a SUCCEEDED job this shard still holds, instead
// of their InitSpecs. Internal to the shard (server/shard.h says when
// RegisterJob applies it); the coordinator checked the names and shapes at
// submit, and this checks them again, since the file may have changed.
//
//   PS_RETURN_IF_ERROR(InitChunks(shard_id, job));
//   PS_RETURN_IF_ERROR(ApplyWarmStart(job, source.get(), shard_id));
//
// Thread safety: `job` is not shared yet; the source's chunks are read
// under their own locks, one at a time.
#ifndef SERVER_INTERNAL_WARM_START_H_
#define SERVER_INTERNAL_WARM_START_H_

#include <cstdint>

#include "absl/status/status.h"
#include "server/internal/job.h"

namespace ps {
namespace internal {

// Overwrites the values of `job`'s local chunks (made by InitChunks) as
// job.spec.init says; nothing when it is unset. from_file, replicated jobs
// (spec.replication > 1): every copy, primary or backup, is read here from
// the same file by the shard that holds it, so all copies agree from
// version 0 and a backup promoted before its first forward serves what the
// primary would have (a copy that rejoins later is not warm-started: it
// takes the live copies' state). from_job: `source` is the job of that id
// on this shard (null when it is not here) and each local chunk the
// placement makes this shard the primary of must be the same chunk there
// (the coordinator gave this job its source's placement, and its backups
// on the ring of the source's shards); with init.optimizer_state its
// optimizer state comes too. A replicated job's backup copies are left as
// InitChunks made them, marked as not holding the initial state
// (Chunk::initial_held): the primary forwards it to them (its first
// forward to a backup is a state), and every answer of the job's chunks,
// version 0 too, waits until each live backup acknowledged one
// (Chunk::initial_replicated), so that no worker sees a value that a
// failover could take back. INVALID_ARGUMENT naming "spec.init.from_file"
// and the file, or "spec.init.from_job" and the job, and the tensor; `job`
// is then to be discarded.
absl::Status ApplyWarmStart(Job& job, const Job* source, uint32_t shard_id);

// A replicated job warm-started from a job, registered as a joining copy
// (RegisterJobRequest.joining, not warm-started): none of its chunks holds
// the initial state until a forward brings it. Nothing for other jobs.
void MarkJoiningCopies(Job& job);

}  // namespace internal
}  // namespace ps

#endif  // SERVER_INTERNAL_WARM_START_H_
