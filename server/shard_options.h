// ShardOptions: what a psd tells its Shard (server/shard.h) at start.
#ifndef SERVER_SHARD_OPTIONS_H_
#define SERVER_SHARD_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "common/defaults.h"

namespace ps {

struct ShardOptions {
  // This shard's index in the cluster (Placement chunk.shard values).
  uint32_t shard_id = 0;
  // RegisterJob fails with RESOURCE_EXHAUSTED beyond this many bytes of
  // parameters, optimizer state and BSP gradient buffers.
  uint64_t memory_budget_bytes = kDefaultMemoryBudgetBytes;
  // Reported in ShardStats.address (informational).
  std::string address;
  // Where OpenCheckpoints() keeps this shard's checkpoints ("" = none).
  // Several shards may share one directory (file names carry the shard id).
  std::string checkpoint_dir;
  // Replicated jobs (JobSpec.replication > 1): the deadline of one forward
  // to a backup (it grows up to the max while forwards to that backup run
  // out of time; internal/replicator.h), and the wait before a failed one
  // is tried again (sooner when the coordinator's view moves).
  absl::Duration replicate_deadline =
      absl::Milliseconds(kDefaultReplicateDeadlineMs);
  absl::Duration replicate_max_deadline =
      absl::Milliseconds(kDefaultReplicateMaxDeadlineMs);
  absl::Duration replicate_retry = absl::Milliseconds(kDefaultReplicateRetryMs);
  // For this long after its start, a shard that has not heard the
  // coordinator's replica view yet answers requests for jobs it does not
  // hold with UNAVAILABLE, not FAILED_PRECONDITION: it may be a replicated
  // shard restarted before the coordinator noticed, and the workers must
  // retry, not fail the job (psd: 2 x shard_heartbeat_ms x
  // shard_heartbeat_misses). Zero: no grace.
  absl::Duration unknown_job_grace = absl::ZeroDuration();
  // Live re-placement (Reshard PREPARE): the deadline of one FetchChunks
  // call to another shard, and the most bytes of values and optimizer
  // slots one call asks for (at least one chunk).
  absl::Duration fetch_deadline = absl::Seconds(20);
  uint64_t fetch_batch_bytes = 2 << 20;
  // Testing only (PsdConfig.testing_kill_at_commit_epoch): SIGKILL this
  // process when a COMMIT of this placement epoch arrives. 0: never.
  uint64_t testing_kill_at_commit_epoch = 0;
};

}  // namespace ps

#endif  // SERVER_SHARD_OPTIONS_H_
