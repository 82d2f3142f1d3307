// Whether a job's shards answer a step only once it is durable: BSP with
// checkpoint every_steps: 1 (proto/job.proto CheckpointSpec's guarantee).
// The shard then holds every answer until all of its chunks are checkpointed
// at the new version (server/internal/registration.cc; a shard without a
// checkpoint_dir answers at once), and the client puts a whole step on the
// wire, since a request held back by a window would never be answered
// (worker/client/async_ps_client.cc).
#ifndef CORE_CHECKPOINT_GATE_H_
#define CORE_CHECKPOINT_GATE_H_

#include "proto/job.pb.h"

namespace ps {

inline bool StepAnswersAwaitCheckpoint(const JobSpec& spec) {
  const ConsistencyMode mode = spec.consistency().mode();
  return (mode == BSP || mode == CONSISTENCY_UNSPECIFIED) &&
         spec.checkpoint().every_steps() == 1;
}

// Whether a job's shards answer a step only once their backups hold it:
// BSP with JobSpec.replication > 1 (server/internal/replicator.h). The
// client puts a whole step on the wire for it too.
inline bool StepAnswersAwaitReplicas(const JobSpec& spec) {
  const ConsistencyMode mode = spec.consistency().mode();
  return (mode == BSP || mode == CONSISTENCY_UNSPECIFIED) &&
         spec.replication() > 1;
}

}  // namespace ps

#endif  // CORE_CHECKPOINT_GATE_H_
