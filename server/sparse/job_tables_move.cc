// JobTables' part of a live re-placement (server/sparse/job_tables.h Pause,
// SaveRowsWhere, InstallRows): the pause at a step boundary, the rows of
// an id range out of the paused tables, and into the fresh tables of the
// new placement with the version they were paused at.
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/not_retryable.h"
#include "common/status_macros.h"
#include "core/sparse_ids.h"
#include "server/sparse/internal/tables_stream.h"
#include "server/sparse/job_tables.h"

namespace ps {

using sparse_internal::StepBarrier;

absl::Status JobTables::PausedLocked(uint64_t step) const {
  if (step < pause_step_) return absl::OkStatus();
  return PausedForReplacement(absl::UnavailableError(
      absl::StrFormat("job %s sparse tables on shard %d pause at step %d for a "
                      "re-placement; retry",
                      job_id_, where_.shard_id, pause_step_)));
}

bool JobTables::OwnsRows() const {
  return where_.owners.empty() ||
         std::find(where_.owners.begin(), where_.owners.end(),
                   where_.shard_id) != where_.owners.end();
}

absl::StatusOr<bool> JobTables::Pause(uint64_t step) {
  absl::MutexLock l(&mu_);
  const uint64_t version = barrier_.version();
  if (mode_ != BSP) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "consistency.mode: job %s's sparse tables move under BSP only",
        job_id_));
  }
  if (!OwnsRows()) {  // no push ever comes: nothing to wait for
    pause_step_ = step;
    return true;
  }
  if (version > step) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "pause_step: job %s's sparse tables on shard %d are at version %d, "
        "past step %d; pause at a later step",
        job_id_, where_.shard_id, version, step));
  }
  if (version == step && barrier_.pending_bytes() > 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "pause_step: job %s's sparse tables on shard %d hold pushes of step "
        "%d; pause at a later step",
        job_id_, where_.shard_id, step));
  }
  for (uint32_t w = 0; w < where_.num_workers; ++w) {
    if (version == step && barrier_.HasPushed(w)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "pause_step: job %s's sparse tables on shard %d hold worker %d's "
          "push of step %d; pause at a later step",
          job_id_, where_.shard_id, w, step));
    }
  }
  pause_step_ = step;
  return version == step;
}

void JobTables::Unpause() {
  absl::MutexLock l(&mu_);
  pause_step_ = UINT64_MAX;
}

bool JobTables::Quiesced(uint64_t step) const {
  absl::MutexLock l(&mu_);
  if (pause_step_ != step) return false;
  if (!OwnsRows()) return true;
  if (barrier_.version() != step) return false;
  for (uint32_t w = 0; w < where_.num_workers; ++w) {
    if (barrier_.HasPushed(w)) return false;
  }
  return true;
}

uint32_t JobTables::OwnerOf(uint64_t id) const {
  return RowOwner(id, where_.owners, where_.num_shards);
}

absl::Status JobTables::SaveRowsWhere(const SparseTable::IdFilter& keep,
                                      ByteSink& sink) const {
  StepBarrier::State state;
  {
    absl::MutexLock l(&mu_);
    if (pause_step_ == UINT64_MAX || barrier_.version() != pause_step_) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "job %s's sparse tables on shard %d are not paused and quiesced "
          "(version %d)",
          job_id_, where_.shard_id, barrier_.version()));
    }
    // Quiesced: nothing buffered (BSP keeps no per-worker steps either).
    state = barrier_.CopyState();
  }
  PS_RETURN_IF_ERROR(sparse_internal::WriteBarrierState(
      state, where_.num_workers, static_cast<uint32_t>(tables_->size()), sink,
      /*increment=*/true));
  return tables_->SaveRowsWhere(keep, sink);
}

absl::Status JobTables::InstallRows(absl::Span<ByteSource* const> streams) {
  if (streams.empty()) {
    return absl::InvalidArgumentError("streams: none (at least this shard's)");
  }
  PS_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<SparseTable>> staged,
                      tables_->Empty());
  const SparseTable::IdFilter mine = [this](uint64_t id) {
    return OwnerOf(id) == where_.shard_id;
  };
  StepBarrier::State state;
  for (size_t i = 0; i < streams.size(); ++i) {
    bool increment = false;
    absl::StatusOr<StepBarrier::State> next = sparse_internal::ReadBarrierState(
        *streams[i], where_.num_workers, *tables_, &increment);
    absl::Status st = next.status();
    if (st.ok() && !increment) {
      st = absl::InvalidArgumentError("a full stream, not rows to add");
    }
    if (st.ok() && i > 0 && next->version != state.version) {
      st = absl::InvalidArgumentError(
          absl::StrCat("version ", next->version, ", but the stream before it ",
                       "has ", state.version));
    }
    if (st.ok()) {
      for (const auto& p : next->pending) {
        if (p != nullptr) st = absl::InvalidArgumentError("holds pushes");
      }
    }
    if (st.ok()) st = tables_->ApplyIncrements(staged, *streams[i], mine);
    if (!st.ok()) {
      return absl::Status(
          st.code(),
          absl::StrCat("rows stream ", i, " of ", streams.size(), " for shard ",
                       where_.shard_id, ": ", st.message()));
    }
    if (i == 0) state = *std::move(next);
  }
  absl::WriterMutexLock no_applies(&apply_mu_);
  absl::MutexLock l(&mu_);
  if (barrier_.version() != 0 || barrier_.pending_bytes() > 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "job %s's sparse tables on shard %d have exchanged already (version "
        "%d); rows are installed into fresh tables only",
        job_id_, where_.shard_id, barrier_.version()));
  }
  tables_->Replace(std::move(staged));
  barrier_.Restore(std::move(state), /*restarted=*/false);
  durable_ = barrier_.version();
  return absl::OkStatus();
}

}  // namespace ps
