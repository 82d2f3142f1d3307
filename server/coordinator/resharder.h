// Resharder: one live re-placement of a running job's dense chunks
// (`psctl scale JOB --shards=N`), driven over the shards' Reshard RPC
// (proto/ps.proto ReshardRequest) on the calling thread:
//
//   1. probe: PAUSE with step 0 on every shard reads the highest chunk
//      version; the pause step B is a few steps past it;
//   2. PAUSE(B) on every shard: pushes of steps >= B are refused (the
//      workers retry); a shard already past B refuses, and the job is
//      paused again further ahead (ABORT first, B moved out 4x as far).
//      ASP/SSP: every push is refused, and the shards are quiesced at once;
//   3. PAUSE(B) again on every shard until each reports every chunk at
//      version B (quiesced), within `quiesce_deadline` plus two step times
//      per step from the highest version to B;
//   4. PREPARE on every shard at once: the new owners fetch the chunks that
//      move from their old owners;
//   5. `commit`: the new placement into the coordinator's store (the point
//      of no return: from here a restarted coordinator finishes the move);
//   6. COMMIT on every shard at once: the shards serve the new placement
//      and refuse the old epoch with ABORTED, so the workers fetch their
//      assignments again and resume at B.
// A failure before 5 sends ABORT to every shard (the job goes on as it
// was; after PREPARE, again to a shard that did not answer, until
// `commit_deadline`) and ends with the phase "aborted: <why>". After 5 the move
// rolls forward: COMMIT is tried again on the shards that have not answered it
// (dead at the commit, then restarted: a checkpointing job's shard comes
// back with what it prepared, server/shard_reshard_restore.cc) until
// `commit_deadline`; they are the status's late_shards, and the phase is
// "done". A shard that answers that it cannot commit (restarted without
// its prepared state) or one still silent at the deadline ends it
// "failed: <why>" (the coordinator then fails the job: its shards would
// disagree on the placement).
//
//   Resharder::Hooks hooks{...};
//   ReshardStatus done = Resharder(options, hooks).Run(job_id, from, to,
//                                                       status);
#ifndef SERVER_COORDINATOR_RESHARDER_H_
#define SERVER_COORDINATOR_RESHARDER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"
#include "proto/ps.pb.h"

namespace ps {

class Resharder {
 public:
  struct Options {
    uint32_t num_shards = 1;
    // Steps past the highest chunk version for the first pause step.
    uint64_t first_margin = 2;
    // Tries of a pause step before giving up (each 4x further ahead).
    int pause_tries = 6;
    // Deadline of one shard call, and how long the chunks may take to
    // reach the pause step (a worker missing that long: the move aborts
    // and the job goes on).
    absl::Duration call_deadline = absl::Seconds(30);
    absl::Duration quiesce_deadline = absl::Seconds(60);
    // The job's recent time per step (0: unknown): the chunks get two of
    // them per step they still have to run to the pause step.
    absl::Duration step_time = absl::ZeroDuration();
    absl::Duration commit_deadline = absl::Seconds(60);
    absl::Duration commit_retry = absl::Milliseconds(200);
    // Between two polls of the shards' pause.
    absl::Duration poll = absl::Milliseconds(2);
  };
  struct Hooks {
    // One shard's Reshard, blocking up to `deadline`.
    std::function<absl::Status(uint32_t shard, const ReshardRequest&,
                               absl::Time deadline, ReshardResponse*)>
        reshard;
    // Stores `to` as the job's placement (durable before it returns OK).
    std::function<absl::Status(const Placement& to, const ReshardStatus&)>
        commit;
    // The status so far (phase changes), for GetJob.
    std::function<void(const ReshardStatus&)> update;
    // The shards' addresses now, by id.
    std::function<std::vector<std::string>()> addresses;
    std::function<absl::Time()> clock;
    // Optional: true once the coordinator shuts down (the wait for the
    // pause step gives up, and the re-placement aborts).
    std::function<bool()> stopping;
  };

  Resharder(Options options, Hooks hooks)
      : options_(options), hooks_(std::move(hooks)) {}

  // Moves job `job_id` from placement `from` to `to` (epoch from + 1).
  // `status` carries target/from shards and requested_s; returns it filled
  // (phase "done" or "aborted: ...", the pause step, moved chunks and
  // bytes, pause_ms, reached_s).
  ReshardStatus Run(const std::string& job_id, const Placement& from,
                    const Placement& to, ReshardStatus status);

  // COMMIT of `to` (its epoch, with the pause step) on every shard, again
  // on those that failed, every `commit_retry`, until all answered OK (the
  // ones that needed more than the first try in `*late`, ascending).
  // Step 6, and a coordinator that restarted after step 5. An answer that
  // retrying cannot change (NOT_FOUND, FAILED_PRECONDITION,
  // INVALID_ARGUMENT: the shard lost what it prepared) ends it at once;
  // DEADLINE_EXCEEDED naming the shards still failing past
  // commit_deadline. Both name the shard.
  absl::Status CommitAll(const std::string& job_id, const Placement& to,
                         uint64_t pause_step, std::vector<uint32_t>* late);
  // ABORT on every shard (a coordinator that restarted before step 5);
  // the first failure, after asking every shard.
  absl::Status AbortAll(const std::string& job_id, uint64_t epoch);
  // ABORT on every shard, and again, as CommitAll does, on those that did
  // not answer until commit_deadline: a move aborted after its PREPAREs
  // (a shard killed then comes back paused with what it prepared, and
  // nothing else would lift that pause). A shard that answers it does not
  // hold the job counts as done.
  absl::Status AbortPrepared(const std::string& job_id, uint64_t epoch);

 private:
  ReshardRequest Request(const std::string& job_id, uint64_t epoch,
                         ReshardRequest::Phase phase) const;
  // `request` on every shard at once; the first failure naming its shard.
  absl::Status OnEveryShard(const ReshardRequest& request,
                            std::vector<ReshardResponse>* responses);
  // `request` on `shards` at once; each one's result, by shard id.
  std::vector<absl::Status> OnShards(const ReshardRequest& request,
                                     const std::vector<uint32_t>& shards,
                                     std::vector<ReshardResponse>* responses);
  // `request` on every shard, again every commit_retry on those that
  // failed with a code a retry may change, until all answered (those that
  // needed a retry in `*late`) or commit_deadline (DEADLINE_EXCEEDED naming
  // them). A settled failure (NOT_FOUND, FAILED_PRECONDITION,
  // INVALID_ARGUMENT) ends it at once with `settled_fails`, else counts as
  // answered.
  absl::Status UntilAnswered(const ReshardRequest& request, bool settled_fails,
                             std::vector<uint32_t>* late);
  // Steps 1-3; the pause step in *step.
  absl::Status Pause(const std::string& job_id, uint64_t epoch,
                     ReshardStatus& status);
  // Polls PAUSE(step) until every shard is quiesced; `steps`: how many
  // steps the chunks had to run to it when it was set.
  absl::Status AwaitQuiesced(const ReshardRequest& pause, uint64_t steps);

  const Options options_;
  const Hooks hooks_;
};

// The chunk copies (primaries and backups) that `to` puts on a shard which
// held no copy of that chunk under `from` (those the shards fetch), and
// their bytes.
void CountMoves(const Placement& from, const Placement& to, uint32_t* chunks,
                uint64_t* bytes);

}  // namespace ps

#endif  // SERVER_COORDINATOR_RESHARDER_H_
