// The consistency rules of a job, in one place (server/shard.h states
// them): how a validated push is applied under BSP, ASP and SSP, what a
// PushPull or Pull waits for, and what a membership change completes.
// Storage (job.h), waiting (waits.h) and stats live elsewhere.
//
//   PushCounts counts = ApplyPush(job, push, &ready, &advanced);
//   CompleteAll(&ready);   // waits.h, under no lock
//
// Thread safety: any thread. A push takes its chunks' mutexes one at a time
// (and, SSP, the job's WaitState::mu once); counters are atomics.
#ifndef SERVER_INTERNAL_CONSISTENCY_H_
#define SERVER_INTERNAL_CONSISTENCY_H_

#include <cstdint>
#include <vector>

#include "server/internal/job.h"
#include "server/push_input.h"

namespace ps {
namespace internal {

// What happened to a push's gradients that were not applied.
struct PushCounts {
  uint32_t duplicates = 0;
  uint32_t stale = 0;
  // BSP: the step the job paused at (<= the push's, Job::pause_step) before
  // a chunk took the push; that chunk and the later ones were left alone
  // (the earlier ones took it: the retry is a duplicate there). kNotPaused:
  // none.
  uint64_t paused_at = kNotPaused;
};

// A validated push (validation.h): `gradients[i]` goes to `chunks[i]`.
struct PushArgs {
  uint32_t worker = 0;
  uint64_t step = 0;
  const GradientsIn* gradients = nullptr;
  const std::vector<Chunk*>* chunks = nullptr;
};

// Applies a validated push; completed waits are appended to `ready`, the
// chunks whose version moved to `advanced`. BSP: stops at the first chunk
// that finds the job paused at the push's step under its mutex (`paused`). BSP
// keeps a plain gradient's payload where it arrived (its pieces and their keep)
// until the step is applied when it comes with a keep, and copies it otherwise.
PushCounts ApplyPush(Job& job, const PushArgs& push,
                     std::vector<WaiterPtr>* ready,
                     std::vector<Chunk*>* advanced);

// BSP: applies the step being aggregated on `c` once the quorum arrived.
// True when it did (the waits it completes go to `ready`).
bool ApplyStepIfReady(Job& job, Chunk& c, std::vector<WaiterPtr>* ready)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);

// Sets the membership (one flag per rank). BSP steps whose quorum it
// completes are applied (their chunks go to `advanced`), SSP waits it
// releases go to `ready`. False, changing nothing, when a re-placement
// retired the job (Job::retired): its successor takes the change.
bool ChangeMembership(Job& job, const std::vector<uint8_t>& active,
                      std::vector<WaiterPtr>* ready,
                      std::vector<Chunk*>* advanced);

// What the answer to a PushPull of `step` waits for (BSP: the step
// applied; SSP: the slowest worker within the staleness bound).
void SetPushPullConditions(const Job& job, uint64_t step, Waiter* w);
// What the answer to a Pull waits for (min_version; SSP as above).
void SetPullConditions(const Job& job, uint64_t step, uint64_t min_version,
                       Waiter* w);

}  // namespace internal
}  // namespace ps

#endif  // SERVER_INTERNAL_CONSISTENCY_H_
