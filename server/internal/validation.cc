#include "server/internal/validation.h"

#include <cmath>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/not_retryable.h"
#include "common/status_macros.h"
#include "core/float_bytes.h"
#include "core/wire_format.h"
#include "server/internal/reasons.h"

namespace ps {
namespace internal {
namespace {

absl::Status Reject(Job& job, const char* reason, absl::Status st) {
  job.rejected.Add(reason);
  return st;
}

absl::Status CheckWorkerInRange(Job& job, uint32_t worker) {
  if (worker < job.num_workers) return absl::OkStatus();
  return Reject(job, kWorkerOutOfRange,
                absl::InvalidArgumentError(absl::StrCat(
                    "worker: rank ", worker, " out of range [0, ",
                    job.num_workers, ") of job \"", job.id, "\"")));
}

// The local chunk that entry `i` of a request's chunk list (`list`, e.g.
// "gradients") names; `field` is how messages name the entry's chunk id.
// `seen` maps the ids so far to their entries.
absl::StatusOr<Chunk*> TargetChunk(Job& job, uint32_t shard_id, uint32_t id,
                                   const std::string& field, const char* list,
                                   int i,
                                   absl::flat_hash_map<uint32_t, int>* seen) {
  if (id >= static_cast<uint32_t>(job.placement.chunks_size())) {
    return Reject(job, kUnknownChunk,
                  absl::InvalidArgumentError(absl::StrCat(
                      field, ": ", id, " out of range, job \"", job.id,
                      "\" has ", job.placement.chunks_size(), " chunks")));
  }
  Chunk* c = job.LocalChunk(id);
  if (c == nullptr) {
    const ChunkPlacement& p = job.placement.chunks(id);
    return Reject(job, kChunkNotOnShard,
                  absl::InvalidArgumentError(
                      absl::StrCat(field, ": ", ChunkName(p), " is on shard ",
                                   p.shard(), ", not shard ", shard_id)));
  }
  if (!job.Serves(*c)) {
    // A backup not promoted (yet): the client looks for the shard again.
    const ChunkPlacement& p = c->placement;
    return Reject(
        job, kNotActingPrimary,
        absl::UnavailableError(absl::StrCat(
            field, ": shard ", shard_id, " holds a backup of ", ChunkName(p),
            "; its acting primary is shard ", job.view->ActingPrimary(p),
            " (epoch ", job.view->epoch(), ")")));
  }
  if (auto [it, inserted] = seen->emplace(id, i); !inserted) {
    return Reject(
        job, kDuplicateChunk,
        absl::InvalidArgumentError(absl::StrCat(
            field, ": chunk ", id, " also in ", list, "[", it->second, "]")));
  }
  return c;
}

// The size and version checks of gradient `i` (`g`) for chunk `c`.
absl::Status CheckGradient(Job& job, uint32_t shard_id, uint64_t step, size_t i,
                           const GradientIn& g, const Chunk& c) {
  const std::string field = absl::StrCat("gradients[", i, "]");
  PayloadProblem problem;
  if (absl::Status st = CheckPayload(g.format, g.data.size(), g.indices,
                                     c.length, field, &problem);
      !st.ok()) {
    const char* reason = problem == PayloadProblem::kFormat ? kBadFormat
                         : problem == PayloadProblem::kSize ? kWrongSize
                                                            : kBadIndices;
    return Reject(job, reason,
                  absl::InvalidArgumentError(
                      absl::StrCat(st.message(), "; ", ChunkName(c.placement),
                                   " holds ", c.length, " floats")));
  }
  if (g.has_base_version) {
    return Reject(job, kBadDelta,
                  absl::InvalidArgumentError(absl::StrCat(
                      field,
                      ".base_version: set on a pushed gradient; only "
                      "parameter replies are deltas")));
  }
  const uint64_t version = c.version.load(std::memory_order_acquire);
  if (job.restored && job.mode == BSP &&
      (step > version || g.version > version)) {
    // The worker saw parameters this shard lost when it restarted.
    return Reject(
        job, kAheadOfRestore,
        absl::FailedPreconditionError(absl::StrCat(
            "step: ", step, " (gradient of version ", g.version,
            ") is ahead of ", ChunkName(c.placement), " at version ", version,
            ": shard ", shard_id, " restarted and restored job \"", job.id,
            "\" from its checkpoint of step ", job.restored_from_step,
            "; the updates after it are lost (checkpoint { every_steps: 1 } "
            "makes a restore exact)")));
  }
  // ASP/SSP after a restore: updates after the checkpoint are lost, so a
  // gradient may be of a version the chunk no longer reached. Likewise on a
  // chunk served after a failover (this shard is not its primary): the old
  // primary may have answered a worker with an update not yet replicated,
  // whose own push was then not acknowledged (its worker sends it again).
  const bool failed_over = c.placement.shard() != shard_id;
  if (g.version > version && !job.restored && !failed_over) {
    return Reject(job, kVersionAhead,
                  absl::InvalidArgumentError(absl::StrCat(
                      field, ".version: ", g.version, " is ahead of ",
                      ChunkName(c.placement), " at version ", version)));
  }
  if (job.mode == BSP && step > version) {
    return Reject(job, kFutureStep,
                  absl::InvalidArgumentError(absl::StrCat(
                      "step: ", step, " is ahead of ", ChunkName(c.placement),
                      " at version ", version,
                      " (BSP accepts step t once version t was pulled)")));
  }
  return absl::OkStatus();
}

// The one full read of the payloads: every element must be finite.
absl::Status CheckFinite(Job& job, const GradientsIn& gradients,
                         const std::vector<Chunk*>& chunks) {
  for (size_t i = 0; i < gradients.size(); ++i) {
    const GradientIn& g = gradients[i];
    const int64_t at = g.plain() ? FirstNonFinite(g.data)
                                 : FirstNonFiniteValue(g.format, g.flat_data());
    if (at < 0) continue;
    const float x =
        ValueAt(g.format, g.data.Flatten(), static_cast<size_t>(at));
    // Sparse: name the chunk offset too.
    const std::string offset =
        g.indices.empty()
            ? ""
            : absl::StrCat(" (offset ", OffsetAt(g.indices, at), ")");
    return Reject(job, kNonFinite,
                  absl::InvalidArgumentError(absl::StrCat(
                      "gradients[", i, "].data: element ", at, offset, " is ",
                      std::isnan(x) ? "NaN" : "Inf", " (",
                      ChunkName(chunks[i]->placement), ")")));
  }
  return absl::OkStatus();
}

// A restored BSP job: min_version is a version the worker saw; past the
// next one, this shard lost it when it restarted and will never reach it.
absl::Status CheckPullNotAheadOfRestore(Job& job, uint32_t shard_id,
                                        uint64_t min_version,
                                        const std::vector<Chunk*>& chunks) {
  if (!job.restored || job.mode != BSP) return absl::OkStatus();
  for (Chunk* c : chunks) {
    const uint64_t version = c->version.load(std::memory_order_acquire);
    if (min_version <= version + 1) continue;
    return Reject(
        job, kAheadOfRestore,
        absl::FailedPreconditionError(absl::StrCat(
            "min_version: ", min_version, " is ahead of ",
            ChunkName(c->placement), " at version ", version, ": shard ",
            shard_id, " restarted and restored job \"", job.id,
            "\" from its checkpoint of step ", job.restored_from_step,
            "; the updates after it are lost")));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidatePlacementEpoch(Job& job, uint32_t shard_id,
                                    uint64_t epoch) {
  const uint64_t held = job.placement.epoch();
  if (epoch == held) return absl::OkStatus();
  if (epoch < held) {
    return Reject(job, kOldPlacement,
                  absl::AbortedError(absl::StrCat(
                      "job ", job.id, " was re-placed (placement epoch ", held,
                      "; this request has ", epoch,
                      "): fetch the job's assignment again and resume from "
                      "this step with the new placement")));
  }
  return Reject(
      job, kPlacementAhead,
      absl::UnavailableError(absl::StrCat(
          "shard ", shard_id, " has not committed placement epoch ", epoch,
          " of job ", job.id, " yet (it holds epoch ", held, "); retry")));
}

absl::Status PausedError(const Job& job, uint64_t pause_step) {
  return PausedForReplacement(absl::UnavailableError(
      absl::StrCat("job ", job.id, " pauses at step ", pause_step,
                   " for a re-placement; retry")));
}

absl::Status ValidatePush(Job& job, uint32_t shard_id, uint32_t worker,
                          uint64_t step, const GradientsIn& gradients,
                          std::vector<Chunk*>* chunks) {
  PS_RETURN_IF_ERROR(CheckWorkerInRange(job, worker));
  if (!job.is_active[worker].load(std::memory_order_acquire)) {
    return Reject(job, kInactiveWorker,
                  absl::FailedPreconditionError(absl::StrCat(
                      "worker: rank ", worker,
                      " is not an active member of job \"", job.id, "\"")));
  }
  if (const uint64_t pause = job.pause_step.load(std::memory_order_acquire);
      PushPaused(job.mode, step, pause)) {
    return Reject(job, kPaused, PausedError(job, pause));
  }
  chunks->clear();
  chunks->reserve(gradients.size());
  absl::flat_hash_map<uint32_t, int> seen;
  for (size_t i = 0; i < gradients.size(); ++i) {
    const GradientIn& g = gradients[i];
    PS_ASSIGN_OR_RETURN(Chunk * c,
                        TargetChunk(job, shard_id, g.chunk_id,
                                    absl::StrCat("gradients[", i, "].chunk_id"),
                                    "gradients", static_cast<int>(i), &seen));
    PS_RETURN_IF_ERROR(CheckGradient(job, shard_id, step, i, g, *c));
    chunks->push_back(c);
  }
  // Last: every cheap check passed.
  return CheckFinite(job, gradients, *chunks);
}

absl::Status ValidateHeld(
    Job& job, const google::protobuf::RepeatedPtrField<HeldChunk>& held,
    absl::Span<const uint32_t> ids, const char* list,
    std::vector<uint64_t>* bases) {
  bases->clear();
  if (held.empty()) return absl::OkStatus();
  auto bad = [&](const std::string& field, absl::string_view why) {
    return Reject(job, kBadDelta,
                  absl::InvalidArgumentError(absl::StrCat(field, ": ", why)));
  };
  if (!job.delta_pulls) {
    return bad("held", absl::StrCat("job \"", job.id,
                                    "\" has no delta pulls (its spec's "
                                    "wire.topk_fraction is not below 1)"));
  }
  if (ids.empty()) {
    return bad("held", absl::StrCat("given without ", list,
                                    " (name the chunks the worker holds)"));
  }
  absl::flat_hash_map<uint32_t, size_t> at;
  for (size_t j = 0; j < ids.size(); ++j) at.emplace(ids[j], j);
  bases->assign(ids.size(), kNoBase);
  for (int i = 0; i < held.size(); ++i) {
    const std::string field = absl::StrCat("held[", i, "].chunk_id");
    auto it = at.find(held[i].chunk_id());
    if (it == at.end()) {
      return bad(field, absl::StrCat("chunk ", held[i].chunk_id(),
                                     " is not in ", list));
    }
    if ((*bases)[it->second] != kNoBase || held[i].version() == kNoBase) {
      return bad(field, held[i].version() == kNoBase
                            ? absl::StrCat("version ", kNoBase, " is reserved")
                            : absl::StrCat("chunk ", held[i].chunk_id(),
                                           " listed twice"));
    }
    (*bases)[it->second] = held[i].version();
  }
  return absl::OkStatus();
}

absl::Status ValidatePull(Job& job, uint32_t shard_id, const PullRequest& req,
                          std::vector<Chunk*>* chunks,
                          std::vector<uint64_t>* bases) {
  PS_RETURN_IF_ERROR(CheckWorkerInRange(job, req.worker()));
  chunks->clear();
  if (req.chunk_ids().empty()) {
    // Every chunk this shard serves (not the backups it holds).
    for (const std::shared_ptr<Chunk>& c : job.chunks) {
      if (job.Serves(*c)) chunks->push_back(c.get());
    }
  }
  absl::flat_hash_map<uint32_t, int> seen;
  for (int i = 0; i < req.chunk_ids_size(); ++i) {
    PS_ASSIGN_OR_RETURN(
        Chunk * c,
        TargetChunk(job, shard_id, req.chunk_ids(i),
                    absl::StrCat("chunk_ids[", i, "]"), "chunk_ids", i, &seen));
    chunks->push_back(c);
  }
  PS_RETURN_IF_ERROR(ValidateHeld(
      job, req.held(),
      absl::MakeConstSpan(req.chunk_ids().data(),
                          static_cast<size_t>(req.chunk_ids_size())),
      "chunk_ids", bases));
  return CheckPullNotAheadOfRestore(job, shard_id, req.min_version(), *chunks);
}

absl::Status ValidateMembership(Job& job, const SetMembershipRequest& req,
                                std::vector<uint8_t>* active) {
  auto bad = [&](absl::string_view field, absl::string_view why) {
    return Reject(job, kBadMembership,
                  absl::InvalidArgumentError(absl::StrCat(field, ": ", why)));
  };
  if (req.active_workers().empty()) {
    return bad("active_workers", "must name at least one worker");
  }
  active->assign(job.num_workers, 0);
  for (int i = 0; i < req.active_workers_size(); ++i) {
    const uint32_t r = req.active_workers(i);
    const std::string field = absl::StrCat("active_workers[", i, "]");
    if (r >= job.num_workers) {
      return bad(field, absl::StrCat("rank ", r, " out of range [0, ",
                                     job.num_workers, ")"));
    }
    if ((*active)[r]) {
      return bad(field, absl::StrCat("rank ", r, " listed twice"));
    }
    (*active)[r] = 1;
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace ps
