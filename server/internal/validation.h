// Checks of push, pull and membership requests against a job, before any
// of a request is applied. Each failure is counted in job.rejected under
// its reason (reasons.h) and names the offending field. Internal to the
// shard (server/shard.h lists what is refused).
//
// Thread safety: any thread; reads only lock-free state (atomics and the
// job's immutable configuration) and counts rejections under a leaf lock.
#ifndef SERVER_INTERNAL_VALIDATION_H_
#define SERVER_INTERNAL_VALIDATION_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "proto/ps.pb.h"
#include "server/internal/job.h"
#include "server/push_input.h"

namespace ps {
namespace internal {

// A request's placement_epoch against the job's placement epoch: an older
// one is ABORTED ("job J was re-placed (placement epoch E; this request
// has e) ...": the worker fetches its assignment again), a later one
// UNAVAILABLE ("shard S has not committed placement epoch e of job J
// yet": the client retries). Counted (old_placement, placement_ahead).
absl::Status ValidatePlacementEpoch(Job& job, uint32_t shard_id,
                                    uint64_t epoch);

// UNAVAILABLE "job J pauses at step B for a re-placement; retry" (not
// counted): a BSP push of a step >= job.pause_step.
absl::Status PausedError(const Job& job, uint64_t pause_step);

// Checks a whole push of `worker` for `step` to shard `shard_id`; on
// success `chunks` lists the target chunk of each gradient. A BSP push of
// a step the job pauses at is refused here (PausedError, counted as
// paused) before any of it is applied; consistency.h checks again under
// each chunk's mutex.
absl::Status ValidatePush(Job& job, uint32_t shard_id, uint32_t worker,
                          uint64_t step, const GradientsIn& gradients,
                          std::vector<Chunk*>* chunks);

// Checks a pull; on success `chunks` lists the chunks to answer with
// (req.chunk_ids, or every local chunk when empty) and `bases` the version
// the worker holds of each (ValidateHeld).
absl::Status ValidatePull(Job& job, uint32_t shard_id, const PullRequest& req,
                          std::vector<Chunk*>* chunks,
                          std::vector<uint64_t>* bases);

// Checks a request's `held` chunks (delta pulls) against the chunk ids its
// answer carries (`ids`, in order, from the request's field `list`): a job
// with delta pulls, each entry one of `ids`, none twice. On success
// `bases` is empty when `held` is, else bases[i] is the version held of
// ids[i] (kNoBase: none). Versions are not checked: one the shard does
// not know is answered in full.
absl::Status ValidateHeld(
    Job& job, const google::protobuf::RepeatedPtrField<HeldChunk>& held,
    absl::Span<const uint32_t> ids, const char* list,
    std::vector<uint64_t>* bases);

// Checks a membership change; on success `active` has one flag per rank.
absl::Status ValidateMembership(Job& job, const SetMembershipRequest& req,
                                std::vector<uint8_t>* active);

}  // namespace internal
}  // namespace ps

#endif  // SERVER_INTERNAL_VALIDATION_H_
