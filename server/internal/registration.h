// Building a job from its registration: the spec and placement checks,
// the memory a job needs, its chunks' initial values, and whether two
// registrations are the same. Internal to the shard (server/shard.h says
// what RegisterJob accepts). The job map and the memory budget stay with
// the Shard.
//
// Thread safety: pure functions of their arguments (the Job they build is
// not shared yet).
#ifndef SERVER_INTERNAL_REGISTRATION_H_
#define SERVER_INTERNAL_REGISTRATION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/ps.pb.h"
#include "server/internal/job.h"

namespace ps {
namespace internal {

// Validates `req` for shard `shard_id` and builds the job without its
// chunks. INVALID_ARGUMENT naming the field on error. `local_count` = the
// chunks on this shard; `can_checkpoint`: the shard has a checkpoint store.
// Empty sparse tables of `job` (its spec, placement and workers set) for the
// rows of shard `shard_id`: the job's own, or a replica's copy of another
// shard's (table_replicas.h).
absl::StatusOr<std::unique_ptr<JobTables>> TablesOfShard(const Job& job,
                                                         uint32_t shard_id);

absl::StatusOr<std::shared_ptr<Job>> NewJob(const RegisterJobRequest& req,
                                            uint32_t shard_id,
                                            bool can_checkpoint,
                                            int* local_count);

// Creates the job's chunks on shard `shard_id` with their initial values
// (from spec.seed), every worker active.
absl::Status InitChunks(uint32_t shard_id, Job& job);

// Worker counters and membership of a new job (one flag per rank), and
// (delta pulls) its chunks' change logs, from their current versions.
void InitJobState(Job& job, const std::vector<uint8_t>& active);
// The same without the change logs.
void InitWorkerState(Job& job, const std::vector<uint8_t>& active);

// The bytes one local chunk of `length` floats of `job` holds (parameters,
// their encoding, optimizer state, BSP gradient buffers, change log): what
// the memory budget counts.
uint64_t ChunkBytes(const Job& job, uint64_t length);

// "" when `job` registers the same as `existing`, else the first
// difference, e.g. "spec: modified: num_workers: 2 -> 3". spec.shards is
// not compared: the placement says where the chunks are (and a live
// re-placement changes it, not the shard's copy of the spec).
std::string RegistrationDiff(const Job& existing, const Job& job);

}  // namespace internal
}  // namespace ps

#endif  // SERVER_INTERNAL_REGISTRATION_H_
