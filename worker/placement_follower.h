// Following a job whose dense chunks were re-placed while it trained
// (`psctl scale JOB --shards=N`, issue 29). The coordinator pauses the job
// at step B, the shards move chunks, the coordinator commits the new
// placement (Placement.epoch + 1) to its store and then to every shard; a
// shard then refuses each dense request of an older epoch with ABORTED. The
// worker's run ends there, at the refused step (its push of B, or the pull
// that would start it): nothing of it was applied anywhere, so a new run
// from that step with the new assignment computes the very same gradient.
//
//   FollowOptions options;
//   options.wait = [&](absl::Duration d) {
//     return !stopping.WaitForNotificationWithTimeout(d);
//   };
//   absl::Status s = RunFollowingPlacement(
//       assignment,
//       [&](const Assignment& a, uint64_t start, uint64_t* next) {
//         return TrainFrom(a, start, next);   // a new client and trainer
//       },
//       [&](absl::Duration deadline) { return AskCoordinator(deadline); },
//       options);
//
// Transport-free: the caller's callbacks run the job and ask the
// coordinator (GetAssignment with job_id).
#ifndef WORKER_PLACEMENT_FOLLOWER_H_
#define WORKER_PLACEMENT_FOLLOWER_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"

namespace ps {

struct FollowOptions {
  // Asks for the assignment at most this many times per refusal (the
  // coordinator commits the epoch before any shard does: the first answer
  // should have it); between asks, first_retry, doubled each time.
  int max_asks = 5;
  absl::Duration first_retry = absl::Milliseconds(100);
  // Each ask's deadline.
  absl::Duration ask_deadline = absl::Seconds(10);
  // Waits `d` between asks; false: the worker is stopping (stop asking).
  // Unset: no wait.
  std::function<bool(absl::Duration d)> wait;
  // Polled before each ask: true (the job was aborted) stops following.
  std::function<bool()> aborted;
  // Told of each re-placement followed, before the next run starts. Unset:
  // the line is logged (spdlog info).
  std::function<void(const Assignment& next, uint64_t resume_step)> on_follow;
};

// One run of the job under `assignment` from `start_step` (a new parameter
// client and trainer); `*next_step` gets the first step it did not complete
// (Trainer::next_step).
using RunFrom = std::function<absl::Status(
    const Assignment& assignment, uint64_t start_step, uint64_t* next_step)>;
// The worker's current assignment in the job (GetAssignment with job_id):
// NOT_FOUND when it holds no rank in it any more.
using AskAssignment =
    std::function<absl::StatusOr<Assignment>(absl::Duration deadline)>;

// Whether a run's status says a shard refused its placement epoch (ABORTED:
// "job J was re-placed ..."). A shard also answers ABORTED when the job is
// dropped while a call waits: the coordinator then has no newer placement,
// and following fails (AwaitNewerPlacement).
bool RefusedPlacement(const absl::Status& s);

// Asks until an answer's placement epoch is past `current`'s. The answer
// must keep the job, rank and worker count (else FAILED_PRECONDITION, naming
// what changed). NOT_FOUND at once when the worker lost its rank; after
// max_asks answers of no newer epoch (or errors), FAILED_PRECONDITION
// naming the epochs and the last error; `refused` (the run's status) is
// quoted in each. CANCELLED when options.wait or options.aborted said so.
absl::StatusOr<Assignment> AwaitNewerPlacement(const Assignment& current,
                                               const absl::Status& refused,
                                               const AskAssignment& ask,
                                               const FollowOptions& options);

// Runs `run(first, first.start_step())`; while a run ends with
// RefusedPlacement, fetches the newer assignment and runs again from the
// refused step. Every followed epoch is past the last one, so the loop
// ends. Returns the last run's status, or why following failed. Blocks.
absl::Status RunFollowingPlacement(const Assignment& first, const RunFrom& run,
                                   const AskAssignment& ask,
                                   const FollowOptions& options);

// How many shards hold the job's dense chunks under `a` (JobSpec.shard_ids'
// size, or JobSpec.shards, 0 = every shard of the placement), for the log.
uint32_t PlacedShards(const Assignment& a);

}  // namespace ps

#endif  // WORKER_PLACEMENT_FOLLOWER_H_
