// Live re-placement of a job's dense chunks on one shard (proto/ps.proto
// ReshardRequest; `psctl scale JOB --shards=N`): the pause at a step
// boundary, the copies handed to other shards (FetchChunks), the job built
// under the new placement and what it takes over from the old one at
// COMMIT. Internal to the shard: Shard::Reshard (shard_reshard.cc) keeps
// the job map, the memory budget and the checkpoints, and calls these.
//
//   absl::MutexLock l(&job.replacement.mu);
//   PS_ASSIGN_OR_RETURN(bool quiesced, Pause(job, epoch, step));
//   ...
//   PS_ASSIGN_OR_RETURN(ReplacementPlan plan, PlanReplacement(job, req, ...));
//   PS_ASSIGN_OR_RETURN(FetchTally t, BuildChunks(job, step, batch, fetch,
//                                                 plan));   // without mu
//   ...
//   CarryOver(job, *plan.job);  // at COMMIT, membership_update_mu held
//
// The pause and pushes meet under each chunk's mutex: Pause sets
// Job::pause_step first and then checks every chunk under its lock, and a
// BSP push checks pause_step under the same lock before it is buffered
// (consistency.cc). So once Pause answered OK, no push of a step >= the
// pause step is ever buffered, and a chunk at the pause step stays there.
// ASP and SSP chunks share no step boundary: their pause refuses every push
// (PushPaused, checked under the chunk's lock before it is applied), so
// once Pause answered, every chunk stays at the version it has, which is
// the one copied; the (worker, step) dedupe state travels with it
// (ReplicaChunk.next_steps) and SSP's worker clocks with the job
// (CarryOver), so a push refused part-way and sent again to the new
// placement is applied once on every chunk.
//
// Chunks local under both placements are not copied: the new job shares
// them (Job::chunks holds shared pointers), so memory grows by the fetched
// chunks only.
//
// Thread safety: any thread; each function states the locks it needs.
#ifndef SERVER_INTERNAL_RESHARD_H_
#define SERVER_INTERNAL_RESHARD_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/ps.pb.h"
#include "server/internal/job.h"

namespace ps {
namespace internal {

// INVALID_ARGUMENT naming the spec field when `job` cannot be re-placed
// live: spec.replication > 1, spec.tables.
absl::Status CheckReplaceable(const Job& job);

// INVALID_ARGUMENT naming `epoch` unless it is past the job's placement
// epoch.
absl::Status CheckNewEpoch(const Job& job, uint64_t epoch);

// The highest version among the job's local chunks (0 without any).
uint64_t MaxVersion(const Job& job);

// BSP: whether every local chunk is at version `step` (true without any).
// ASP/SSP: true (the caller holds the pause).
bool Quiesced(const Job& job, uint64_t step);

// Pauses the job at `step` (> 0) for `epoch`: from now on BSP pushes of a
// step >= `step` are refused. True when every local chunk is at version
// `step` already (quiesced). FAILED_PRECONDITION naming the chunk, the
// pause as it was before, when a chunk is past `step` or holds pushes of
// it. ASP/SSP: every push is refused from now on, and the job is quiesced
// at once (`step` only names the pause). Again with the same (epoch, step): the
// same answer, nothing changes. A pause for another epoch or step replaces the
// one held (dropping what was prepared: LiftPause's bytes go to `*released`).
absl::StatusOr<bool> Pause(Job& job, uint64_t epoch, uint64_t step,
                           uint64_t* released)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.replacement.mu);

// Drops the prepared job (a PREPARE still fetching discards what it
// builds); returns the bytes reserved for it, which the caller gives back
// to the budget.
uint64_t DropPrepared(Job& job)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.replacement.mu);

// DropPrepared, and lifts the pause: the job goes on as it was. Never for
// a committed (retired) job, whose pause stays.
uint64_t LiftPause(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.replacement.mu);

// FetchChunks: the states of req.chunk_ids (ReplicaChunk without gradient)
// of a job paused for req.epoch and quiesced. FAILED_PRECONDITION
// otherwise; INVALID_ARGUMENT naming chunk_ids[i] for a chunk not held
// here. Takes the replacement mutex, then each chunk's.
absl::Status CopyChunks(Job& job, uint32_t shard_id,
                        const FetchChunksRequest& req,
                        FetchChunksResponse* resp);

// A PREPARE's job under the new placement (no chunks yet) and what it
// needs: the chunks to fetch, by the shard that holds them now.
struct ReplacementPlan {
  uint32_t shard_id = 0;
  std::shared_ptr<Job> job;
  std::map<uint32_t, std::vector<uint32_t>> fetch;
  uint32_t held = 0;         // local chunks under the new placement
  uint64_t fetch_bytes = 0;  // the fetched chunks' bytes in the budget
};

// Validates req.placement (its epoch == req.epoch; the job's chunks
// exactly, as registration checks them: INVALID_ARGUMENT naming
// placement.*) and req.shard_addresses (one for each shard to fetch from),
// and builds the plan: the old job's registration with the new placement.
absl::StatusOr<ReplacementPlan> PlanReplacement(const Job& old,
                                                const ReshardRequest& req,
                                                uint32_t shard_id,
                                                bool can_checkpoint);

// Fetches `req` from shard `shard` (blocking, within a deadline).
using FetchBatch = std::function<absl::Status(
    uint32_t shard, const FetchChunksRequest& req, FetchChunksResponse* resp)>;

struct FetchTally {
  uint32_t chunks = 0;
  uint64_t bytes = 0;  // values and optimizer slots
};

// Creates plan.job's chunks in placement order: those the old job holds,
// shared; the others fetched from their old shards in batches of at most
// `batch_bytes` of values and slots (at least one chunk each), each at
// version `step`. Membership and worker counters from the old job's (COMMIT
// sets them again). Errors name the shard and the chunk; nothing of `old`
// changes. No lock held; blocks on the fetches.
absl::StatusOr<FetchTally> BuildChunks(const Job& old, uint64_t step,
                                       uint64_t batch_bytes,
                                       const FetchBatch& fetch,
                                       ReplacementPlan& plan);

// COMMIT: hands the old job's membership (every chunk's copy too), its
// counters, rejection counts and trace window to `next` (latency
// histograms start afresh). Again: the same. The caller then retires `old`
// (Job::retired) as it puts `next` in its place.
void CarryOver(Job& old, Job& next)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(old.membership_update_mu);

}  // namespace internal
}  // namespace ps

#endif  // SERVER_INTERNAL_RESHARD_H_
