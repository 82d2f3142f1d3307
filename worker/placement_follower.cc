#include "worker/placement_follower.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace ps {
namespace {

// The ways an answer may not fit the run it continues; "" if it fits.
std::string Mismatch(const Assignment& current, const Assignment& next) {
  if (next.job_id() != current.job_id()) {
    return absl::StrCat("job_id \"", next.job_id(), "\", asked for \"",
                        current.job_id(), "\"");
  }
  if (next.rank() != current.rank() ||
      next.num_workers() != current.num_workers()) {
    return absl::StrCat("rank ", next.rank(), " of ", next.num_workers(),
                        ", trained as rank ", current.rank(), " of ",
                        current.num_workers());
  }
  if (next.placement().epoch() < current.placement().epoch()) {
    return absl::StrCat("placement epoch ", next.placement().epoch(),
                        ", older than the ", current.placement().epoch(),
                        " it trained with");
  }
  return "";
}

}  // namespace

bool RefusedPlacement(const absl::Status& s) {
  return s.code() == absl::StatusCode::kAborted;
}

uint32_t PlacedShards(const Assignment& a) {
  if (a.spec().shard_ids_size() > 0) return a.spec().shard_ids_size();
  return a.spec().shards() != 0 ? a.spec().shards()
                                : a.placement().num_shards();
}

absl::StatusOr<Assignment> AwaitNewerPlacement(const Assignment& current,
                                               const absl::Status& refused,
                                               const AskAssignment& ask,
                                               const FollowOptions& options) {
  const uint64_t epoch = current.placement().epoch();
  const std::string job = current.job_id();
  absl::Duration retry = options.first_retry;
  std::string last = "no answer";
  for (int i = 0; i < options.max_asks; ++i) {
    if (i > 0) {
      if (options.wait && !options.wait(retry)) {
        return absl::CancelledError("worker stopping");
      }
      retry *= 2;
    }
    if (options.aborted && options.aborted()) {
      return absl::CancelledError(absl::StrCat("job ", job, " aborted"));
    }
    absl::StatusOr<Assignment> next = ask(options.ask_deadline);
    if (absl::IsNotFound(next.status())) {
      return absl::NotFoundError(absl::StrCat(
          "job ", job, ": a shard refused placement epoch ", epoch, " (",
          refused.message(), ") and the coordinator says this worker holds ",
          "no rank in the job any more: ", next.status().message()));
    }
    if (!next.ok()) {
      last = absl::StrCat("GetAssignment: ", next.status().message());
      continue;
    }
    if (std::string why = Mismatch(current, *next); !why.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", job, ": after a shard refused placement epoch ", epoch, " (",
          refused.message(), "), the coordinator answered ", why));
    }
    if (next->placement().epoch() > epoch) return next;
    last = absl::StrCat("still placement epoch ", next->placement().epoch());
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "job ", job, ": a shard refused placement epoch ", epoch, " (",
      refused.message(), "), but after ", options.max_asks,
      " asks the coordinator has no newer placement (", last, ")"));
}

absl::Status RunFollowingPlacement(const Assignment& first, const RunFrom& run,
                                   const AskAssignment& ask,
                                   const FollowOptions& options) {
  Assignment current = first;
  uint64_t start = first.start_step();
  while (true) {
    uint64_t next_step = start;
    absl::Status s = run(current, start, &next_step);
    if (!RefusedPlacement(s)) return s;
    absl::StatusOr<Assignment> next =
        AwaitNewerPlacement(current, s, ask, options);
    // Stopping or aborted while asking: the run's own status stands.
    if (absl::IsCancelled(next.status())) return s;
    if (!next.ok()) return next.status();
    start = next_step;
    if (options.on_follow) {
      options.on_follow(*next, start);
    } else {
      spdlog::info(
          "job {}: re-placed at placement epoch {} on {} shards; resuming at "
          "step {}",
          next->job_id(), next->placement().epoch(), PlacedShards(*next),
          start);
    }
    current = *std::move(next);
  }
}

}  // namespace ps
