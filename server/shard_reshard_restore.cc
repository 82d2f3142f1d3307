// Shard: a live re-placement that a restart cut between the coordinator's
// commit and this shard's COMMIT (server/shard_reshard.cc has the phases).
// A checkpointing job's PREPARE writes the job it built beside the
// checkpoints (Checkpointer::WritePrepared) before it answers, so a shard
// killed after the coordinator's store committed the move comes back as
// the coordinator left it:
//
//   restart: the old placement from the newest checkpoint (as always)
//            + PAUSE(E, B) and the prepared job of epoch E from prepared/
//   COMMIT(E, placement, B) --> the prepared job serves (as a COMMIT would
//                               have before the restart)
//   ABORT(E)                --> the pause lifted, the prepared job dropped
//
// A job without checkpoints, or one whose prepared state is unusable,
// comes back without it, and its COMMIT fails FAILED_PRECONDITION for good.
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/internal/checkpointer.h"
#include "server/internal/job.h"
#include "server/internal/reshard.h"
#include "server/shard.h"
#include "spdlog/spdlog.h"

namespace ps {

using internal::Job;
using internal::Replacement;

absl::Status Shard::CheckPrepared(const Job& job, const ReshardRequest& req) {
  const Replacement& r = job.replacement;
  if (req.pause_step() != 0 && req.pause_step() != r.step) {
    return absl::FailedPreconditionError(
        absl::StrCat("pause_step: job ", job.id, " prepared placement epoch ",
                     req.epoch(), " paused at step ", r.step, " on shard ",
                     options_.shard_id, ", not ", req.pause_step()));
  }
  if (req.has_placement() &&
      !google::protobuf::util::MessageDifferencer::Equals(r.prepared->placement,
                                                          req.placement())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "placement: job ", job.id, " prepared another placement of epoch ",
        req.epoch(), " on shard ", options_.shard_id));
  }
  return absl::OkStatus();
}

absl::StatusOr<Shard::JobPtr> Shard::LoadPrepared(const JobPtr& old,
                                                  uint64_t* step,
                                                  std::string* path) const {
  JobPtr next;
  bool committed = false;
  auto accept = [&](JobCheckpoint& ck, const std::string&) -> absl::Status {
    next = nullptr;
    const uint64_t epoch = ck.registration.placement().epoch();
    if (epoch <= old->placement.epoch()) {
      committed = true;
      return absl::FailedPreconditionError(
          absl::StrCat("placement epoch ", epoch, " is not past the ",
                       old->placement.epoch(), " restored"));
    }
    int local_count = 0;
    PS_ASSIGN_OR_RETURN(JobPtr fresh, NewJob(ck.registration, &local_count));
    *step = ck.step;
    PS_RETURN_IF_ERROR(
        checkpointer_->RestorePrepared(std::move(ck), local_count, *fresh));
    next = std::move(fresh);
    return absl::OkStatus();
  };
  absl::StatusOr<CheckpointStore::Loaded> loaded =
      checkpointer_->LoadPrepared(old->id, accept);
  // Its COMMIT wrote the new layout's checkpoint before the restart (and
  // was cut before deleting this): nothing to put back.
  if (!loaded.ok() && committed) return absl::NotFoundError("committed");
  PS_RETURN_IF_ERROR(loaded.status());
  *path = loaded->path;
  return next;
}

absl::Status Shard::PausePrepared(const JobPtr& old, const JobPtr& next,
                                  uint64_t step) {
  // The prepared job's memory is its own (nothing shared with the
  // restored one): all of it is staged until COMMIT or ABORT.
  const uint64_t staged =
      next->bytes + (next->tables != nullptr ? next->tables->bytes_used() : 0);
  PS_RETURN_IF_ERROR(ReserveBytes(*old, staged, "the placement it prepared"));
  next->view = replica_view_;
  absl::MutexLock l(&old->replacement.mu);
  uint64_t released = 0;
  absl::StatusOr<bool> paused =
      internal::Pause(*old, next->placement.epoch(), step, &released);
  if (!paused.ok()) {
    ReleaseBytes(staged);
    return paused.status();
  }
  Replacement& r = old->replacement;
  r.prepared = next;
  r.prepared_answer.Clear();
  r.prepared_answer.set_chunks_held(next->chunks.size());
  r.reserved = staged;
  return absl::OkStatus();
}

void Shard::RestorePrepared(const std::string& job_id, RestoreReport* report) {
  JobPtr old;
  {
    absl::ReaderMutexLock l(&mu_);
    auto it = jobs_.find(job_id);
    if (it != jobs_.end()) old = it->second;
  }
  if (old == nullptr || !old->checkpointing) {
    checkpointer_->RemovePrepared(job_id);  // nothing it could replace
    return;
  }
  uint64_t step = 0;
  std::string path;
  absl::StatusOr<JobPtr> next = LoadPrepared(old, &step, &path);
  absl::Status st = next.status();
  if (absl::IsNotFound(st)) {
    checkpointer_->RemovePrepared(job_id);  // none, or committed already
    return;
  }
  if (st.ok()) st = PausePrepared(old, *next, step);
  if (!st.ok()) {
    checkpointer_->RemovePrepared(job_id);
    report->problems.push_back(
        absl::StrCat("job \"", job_id,
                     "\": the placement it prepared before the restart is "
                     "dropped: ",
                     st.message()));
    return;
  }
  const uint64_t epoch = (*next)->placement.epoch();
  report->restored.push_back(absl::StrCat(
      "job \"", job_id, "\": placement epoch ", epoch, " prepared at step ",
      step, " from ", path, ", paused for its COMMIT or ABORT"));
  spdlog::info(
      "job {}: placement epoch {} prepared before the restart, paused at "
      "step {} on shard {} for the coordinator's COMMIT or ABORT",
      job_id, epoch, step, options_.shard_id);
}

}  // namespace ps
