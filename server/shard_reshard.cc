// Shard: live re-placement of a job's dense chunks (server/shard.h
// Reshard, FetchChunks; the rules are in server/internal/reshard.h). The
// phases of one job, under its Replacement::mu:
//
//   PAUSE(E, B) --quiesced--> PREPARE(E) --> COMMIT(E): the new job serves
//        |                        |
//        +------- ABORT(E) -------+--> the pause lifted, the old job goes on
//
// COMMIT puts the prepared job in the old one's place in the map; the old
// one stays paused, its waits fail ABORTED and its late requests too (an
// older placement epoch), so their workers fetch the new assignment.
#include "server/shard.h"

#include <atomic>
#include <csignal>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/internal/checkpointer.h"
#include "server/internal/job.h"
#include "server/internal/reasons.h"
#include "server/internal/reshard.h"
#include "server/internal/reshard_replicas.h"
#include "server/internal/reshard_tables.h"
#include "server/internal/waits.h"
#include "spdlog/spdlog.h"

namespace ps {

using internal::Job;
using internal::Replacement;

void Shard::SetChunkFetcher(ChunkFetcher fetcher) {
  absl::MutexLock l(&fetcher_mu_);
  fetcher_ = std::move(fetcher);
}

absl::StatusOr<Shard::JobPtr> Shard::HeldJob(const std::string& job_id) const {
  absl::ReaderMutexLock l(&mu_);
  if (shutdown_) return ShuttingDown();
  auto it = jobs_.find(job_id);
  if (it != jobs_.end()) return it->second;
  rejected_.Add(internal::kUnknownJob);
  return absl::NotFoundError(absl::StrCat("job_id: shard ", options_.shard_id,
                                          " holds no job \"", job_id, "\""));
}

absl::Status Shard::Reshard(const ReshardRequest& req, ReshardResponse* resp) {
  resp->Clear();
  PS_ASSIGN_OR_RETURN(JobPtr job, HeldJob(req.job_id()));
  switch (req.phase()) {
    case ReshardRequest::PAUSE:
      return PauseJob(job, req, resp);
    case ReshardRequest::PREPARE:
      return PrepareJob(job, req, resp);
    case ReshardRequest::COMMIT:
      return CommitJob(job, req, resp);
    case ReshardRequest::ABORT:
      return AbortJob(job, req);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("phase: ", static_cast<int>(req.phase()),
                       " is not PAUSE, PREPARE, COMMIT or ABORT"));
  }
}

absl::Status Shard::FetchChunks(const FetchChunksRequest& req,
                                FetchChunksResponse* resp) {
  resp->Clear();
  PS_ASSIGN_OR_RETURN(JobPtr job, HeldJob(req.job_id()));
  if (req.has_rows_for_shard()) {
    return internal::CopyRows(*job, options_.shard_id, req, resp);
  }
  return internal::CopyChunks(*job, options_.shard_id, req, resp);
}

absl::Status Shard::ReserveBytes(const Job& job, uint64_t bytes,
                                 absl::string_view what) {
  absl::MutexLock l(&mu_);
  if (!FitsBudget(bytes)) {
    rejected_.Add(internal::kOverBudget);
    return absl::ResourceExhaustedError(absl::StrCat(
        "memory_budget_bytes: job ", job.id, " needs ", bytes,
        " more bytes on shard ", options_.shard_id, " for ", what,
        ", but only ",
        options_.memory_budget_bytes - bytes_held_ - bytes_reserved_,
        " of its memory_budget_bytes ", options_.memory_budget_bytes,
        " are free"));
  }
  bytes_reserved_ += bytes;
  return absl::OkStatus();
}

void Shard::ReleaseBytes(uint64_t bytes) {
  if (bytes == 0) return;
  absl::MutexLock l(&mu_);
  bytes_reserved_ -= bytes;
}

void Shard::ReleaseReplacement(Job& job) {
  uint64_t released = 0;
  {
    absl::MutexLock l(&job.replacement.mu);
    if (!job.replacement.committed) released = internal::LiftPause(job);
  }
  ReleaseBytes(released);
}

namespace {

// FAILED_PRECONDITION for a phase sent to a job that a COMMIT replaced
// since the caller looked it up.
absl::Status Replaced(const Job& job, uint32_t shard_id) {
  return absl::FailedPreconditionError(
      absl::StrCat("job ", job.id, " was re-placed on shard ", shard_id,
                   " meanwhile; ask again"));
}

// A PREPARE's fetches through `fetcher`, each within `deadline`.
internal::FetchBatch Fetching(Shard::ChunkFetcher fetcher, uint32_t shard_id,
                              const ReshardRequest& req,
                              absl::Duration deadline) {
  return [fetcher = std::move(fetcher), shard_id, &req, deadline](
             uint32_t shard, const FetchChunksRequest& f,
             FetchChunksResponse* out) {
    if (!fetcher) {
      return absl::FailedPreconditionError(
          absl::StrCat("shard ", shard_id, " has no way to fetch chunks"));
    }
    return fetcher(req.shard_addresses(shard), f, absl::Now() + deadline, out);
  };
}

// A PREPARE's job built: its chunks, then its sparse rows (their tally in
// `*rows`, their staged bytes granted by `reserve`). No lock held; blocks
// on the fetches.
absl::StatusOr<internal::FetchTally> Build(const internal::Job& old,
                                           uint64_t step, uint64_t batch_bytes,
                                           const internal::FetchBatch& fetch,
                                           const internal::ReserveRows& reserve,
                                           const ReshardRequest& req,
                                           internal::ReplacementPlan& plan,
                                           internal::FetchTally* rows) {
  PS_ASSIGN_OR_RETURN(
      internal::FetchTally tally,
      internal::BuildChunks(old, step, batch_bytes, fetch, plan));
  PS_ASSIGN_OR_RETURN(*rows,
                      internal::BuildTables(old, req, fetch, reserve, plan));
  return tally;
}

// The rows a PREPARE fetched, for its log line ("" without tables).
std::string RowsNote(const internal::Job& job, const internal::FetchTally& t) {
  if (job.tables == nullptr) return "";
  return absl::StrFormat(", rows from %d shards (%.1f MB)", t.chunks,
                         static_cast<double>(t.bytes) / 1e6);
}

}  // namespace

absl::Status Shard::PauseJob(const JobPtr& job, const ReshardRequest& req,
                             ReshardResponse* resp) {
  PS_RETURN_IF_ERROR(internal::CheckReplaceable(*job));
  PS_RETURN_IF_ERROR(internal::CheckNewEpoch(*job, req.epoch()));
  PS_RETURN_IF_ERROR(internal::CheckCopiesInService(*job, job->placement));
  if (req.pause_step() == 0) {  // the probe: changes nothing
    resp->set_max_version(internal::MaxVersion(*job));
    return absl::OkStatus();
  }
  if (req.pause_step() == internal::kNotPaused) {
    return absl::InvalidArgumentError(
        absl::StrCat("pause_step: ", req.pause_step(), " is out of range"));
  }
  uint64_t released = 0;
  bool fresh = false, quiesced = false, log_quiesced = false;
  {
    absl::MutexLock l(&job->replacement.mu);
    Replacement& r = job->replacement;
    if (r.committed) return Replaced(*job, options_.shard_id);
    if (r.epoch > req.epoch()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "epoch: job ", job->id, " pauses for placement epoch ", r.epoch,
          " on shard ", options_.shard_id, ", later than ", req.epoch()));
    }
    fresh = r.epoch != req.epoch() || r.step != req.pause_step();
    PS_ASSIGN_OR_RETURN(quiesced, internal::Pause(*job, req.epoch(),
                                                  req.pause_step(), &released));
    log_quiesced = quiesced && !r.quiesced_logged;
    r.quiesced_logged |= quiesced;
  }
  ReleaseBytes(released);
  // What an earlier pause prepared is not this one's.
  if (fresh && job->checkpointing) checkpointer_->RemovePrepared(job->id);
  // A pause moved to another step: what it held runs again (and is held
  // again where the new step still pauses it).
  if (fresh) job->held_pushes.ResumeAll();
  if (fresh) {
    spdlog::info("job {}: paused at step {} for placement epoch {} on shard {}",
                 job->id, req.pause_step(), req.epoch(), options_.shard_id);
  }
  if (log_quiesced) {
    spdlog::info(
        "job {}: every chunk on shard {} at step {} (placement epoch {})",
        job->id, options_.shard_id, req.pause_step(), req.epoch());
  }
  resp->set_quiesced(quiesced);
  resp->set_max_version(internal::MaxVersion(*job));
  return absl::OkStatus();
}

absl::StatusOr<internal::FetchTally> Shard::BuildPrepared(
    const Job& job, const ReshardRequest& req, uint64_t step,
    internal::ReplacementPlan& plan, internal::FetchTally* rows) {
  ChunkFetcher fetcher;
  {
    absl::MutexLock l(&fetcher_mu_);
    fetcher = fetcher_;
  }
  // The rows' staged copy counts against the budget until COMMIT or ABORT
  // too, stream by stream as each one's size is known.
  std::atomic<uint64_t> rows_reserved{0};
  const internal::ReserveRows reserve_rows =
      [&](uint64_t bytes) -> absl::Status {
    PS_RETURN_IF_ERROR(
        ReserveBytes(job, bytes, "the table rows it would hold"));
    rows_reserved.fetch_add(bytes);
    return absl::OkStatus();
  };
  absl::StatusOr<internal::FetchTally> tally =
      Build(job, step, options_.fetch_batch_bytes,
            Fetching(fetcher, options_.shard_id, req, options_.fetch_deadline),
            reserve_rows, req, plan, rows);
  plan.fetch_bytes += rows_reserved.load();
  // Durable before the answer: a shard that dies between the coordinator's
  // commit and its own COMMIT restarts with it (RestorePrepared).
  if (tally.ok() && plan.job->checkpointing) {
    const absl::Time start = absl::Now();
    PS_RETURN_IF_ERROR(checkpointer_->WritePrepared(*plan.job));
    spdlog::info(
        "job {}: placement epoch {} prepared on shard {} is durable "
        "(written in {} ms)",
        job.id, req.epoch(), options_.shard_id,
        absl::ToInt64Milliseconds(absl::Now() - start));
  }
  return tally;
}

absl::Status Shard::PrepareJob(const JobPtr& job, const ReshardRequest& req,
                               ReshardResponse* resp) {
  const absl::Time start = absl::Now();
  PS_RETURN_IF_ERROR(internal::CheckReplaceable(*job));
  PS_RETURN_IF_ERROR(internal::CheckNewEpoch(*job, req.epoch()));
  // Replicated: every copy, old and new, in service (a failover since the
  // pause aborts the move; the copies it fetches are the acting primary's).
  PS_RETURN_IF_ERROR(internal::CheckCopiesInService(*job, job->placement));
  PS_RETURN_IF_ERROR(internal::CheckCopiesInService(*job, req.placement()));
  PS_ASSIGN_OR_RETURN(internal::ReplacementPlan plan,
                      internal::PlanReplacement(*job, req, options_.shard_id,
                                                checkpointer_->enabled()));
  plan.job->view = replica_view_;
  uint64_t step = 0, generation = 0, released = 0;
  {
    absl::MutexLock l(&job->replacement.mu);
    Replacement& r = job->replacement;
    if (r.committed) return Replaced(*job, options_.shard_id);
    if (r.epoch != req.epoch() || !internal::Quiesced(*job, r.step)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", job->id, " is not paused and quiesced for placement epoch ",
          req.epoch(), " on shard ", options_.shard_id, " (PAUSE first)"));
    }
    if (r.prepared != nullptr &&
        google::protobuf::util::MessageDifferencer::Equals(
            r.prepared->placement, req.placement())) {
      *resp = r.prepared_answer;  // a resent PREPARE
      return absl::OkStatus();
    }
    if (r.preparing) {
      return absl::UnavailableError(
          absl::StrCat("shard ", options_.shard_id, " is still preparing ",
                       "placement epoch ", req.epoch(), " of job ", job->id));
    }
    released = internal::DropPrepared(*job);  // another placement before
    ReleaseBytes(released);
    PS_RETURN_IF_ERROR(
        ReserveBytes(*job, plan.fetch_bytes, "the chunks it would fetch"));
    r.preparing = true;
    step = r.step;
    generation = r.generation;
  }
  internal::FetchTally rows;
  absl::StatusOr<internal::FetchTally> tally =
      BuildPrepared(*job, req, step, plan, &rows);
  absl::MutexLock l(&job->replacement.mu);
  Replacement& r = job->replacement;
  if (r.generation != generation) {
    ReleaseBytes(plan.fetch_bytes);
    // Not this pause's: gone, unless a later PREPARE writes its own now.
    if (plan.job->checkpointing && !r.preparing && r.prepared == nullptr) {
      checkpointer_->RemovePrepared(job->id);
    }
    return absl::AbortedError(
        absl::StrCat("placement epoch ", req.epoch(), " of job ", job->id,
                     " was aborted or paused again on shard ",
                     options_.shard_id, " while it was prepared"));
  }
  r.preparing = false;
  if (!tally.ok()) {
    ReleaseBytes(plan.fetch_bytes);
    return tally.status();
  }
  resp->set_chunks_fetched(tally->chunks);
  resp->set_bytes_fetched(tally->bytes + rows.bytes);
  resp->set_chunks_held(plan.held);
  r.prepared = plan.job;
  r.prepared_answer = *resp;
  r.reserved = plan.fetch_bytes;
  spdlog::info(
      "job {}: prepared epoch {} on shard {}: {} chunks held, {} fetched "
      "({:.1f} MB){} in {} ms",
      job->id, req.epoch(), options_.shard_id, plan.held, tally->chunks,
      static_cast<double>(tally->bytes) / 1e6, RowsNote(*job, rows),
      absl::ToInt64Milliseconds(absl::Now() - start));
  return absl::OkStatus();
}

absl::Status Shard::InstallReplacement(const JobPtr& old, const JobPtr& next,
                                       uint64_t reserved) {
  // Old job's write mutex, then its membership (internal/job.h's order):
  // no checkpoint of the old layout and no membership change slips in.
  std::optional<absl::MutexLock> files;
  if (old->checkpointing) files.emplace(&old->files.mu);
  absl::MutexLock members(&old->membership_update_mu);
  const absl::Status dropped = absl::FailedPreconditionError(
      absl::StrCat("job ", old->id, " was dropped from shard ",
                   options_.shard_id, " during its re-placement"));
  {
    absl::ReaderMutexLock l(&mu_);
    if (shutdown_) return ShuttingDown();
    auto it = jobs_.find(old->id);
    if (it == jobs_.end() || it->second != old) return dropped;
  }
  internal::CarryOver(*old, *next);
  if (next->checkpointing) {
    // Durable before the answer, after the old layout's files: a restart
    // restores the new placement.
    {
      absl::MutexLock l(&next->files.mu);
      next->files.sequence = old->files.sequence;
    }
    if (absl::Status st = checkpointer_->Write(next); !st.ok()) {
      return absl::Status(
          st.code(), absl::StrCat("the checkpoint of placement epoch ",
                                  next->placement.epoch(), " of job ", old->id,
                                  " failed: ", st.message()));
    }
    absl::MutexLock l(&next->files.mu);
    old->files.sequence = next->files.sequence;
    old->files.removed = true;  // its files stay; it writes no more
  }
  // Before `next` serves: closing clears the chunks' wait lists, which
  // `next` shares.
  internal::CloseJob(
      *old, absl::AbortedError(absl::StrCat(
                "job ", old->id, " was re-placed (placement epoch ",
                next->placement.epoch(), "; this request has ",
                old->placement.epoch(),
                "): fetch the job's assignment again and resume from this "
                "step with the new placement")));
  {
    absl::MutexLock l(&mu_);
    auto it = jobs_.find(old->id);
    if (it == jobs_.end() || it->second != old) return dropped;
    it->second = next;
    bytes_reserved_ -= reserved;
    bytes_held_ = bytes_held_ - old->bytes + next->bytes;
  }
  old->retired = true;
  return absl::OkStatus();
}

absl::Status Shard::CommitJob(const JobPtr& job, const ReshardRequest& req,
                              ReshardResponse* resp) {
  const absl::Time start = absl::Now();
  if (options_.testing_kill_at_commit_epoch != 0 &&
      req.epoch() == options_.testing_kill_at_commit_epoch) {
    spdlog::warn(
        "job {}: testing_kill_at_commit_epoch {}: shard {} kills itself at "
        "the COMMIT",
        job->id, req.epoch(), options_.shard_id);
    raise(SIGKILL);
  }
  if (req.epoch() > 0 && job->placement.epoch() == req.epoch()) {
    resp->set_chunks_held(job->chunks.size());  // committed before
    return absl::OkStatus();
  }
  PS_RETURN_IF_ERROR(internal::CheckNewEpoch(*job, req.epoch()));
  absl::MutexLock l(&job->replacement.mu);
  Replacement& r = job->replacement;
  if (r.committed) {
    // A COMMIT that overtook this one since the lookup.
    PS_ASSIGN_OR_RETURN(JobPtr now, HeldJob(job->id));
    if (now->placement.epoch() != req.epoch()) {
      return Replaced(*job, options_.shard_id);
    }
    resp->set_chunks_held(now->chunks.size());
    return absl::OkStatus();
  }
  if (r.epoch != req.epoch() || r.prepared == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job->id, " has no prepared placement epoch ", req.epoch(),
        " on shard ", options_.shard_id, " (PREPARE first)"));
  }
  PS_RETURN_IF_ERROR(CheckPrepared(*job, req));
  const JobPtr next = r.prepared;
  PS_RETURN_IF_ERROR(InstallReplacement(job, next, r.reserved));
  r.committed = true;
  r.prepared = nullptr;
  r.reserved = 0;
  // The new layout's checkpoint holds it now.
  if (next->checkpointing) checkpointer_->RemovePrepared(job->id);
  resp->set_chunks_held(next->chunks.size());
  spdlog::info(
      "job {}: committed placement epoch {} on shard {}: {} chunks held (was "
      "{}), at step {}{}, in {} ms",
      job->id, req.epoch(), options_.shard_id, next->chunks.size(),
      job->chunks.size(), r.step,
      next->checkpointing ? ", checkpoint of the new layout written" : "",
      absl::ToInt64Milliseconds(absl::Now() - start));
  return absl::OkStatus();
}

absl::Status Shard::AbortJob(const JobPtr& job, const ReshardRequest& req) {
  if (req.epoch() <= job->placement.epoch()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "epoch: placement epoch ", req.epoch(), " of job ", job->id,
        " is committed on shard ", options_.shard_id, " (it holds epoch ",
        job->placement.epoch(), "); it cannot be aborted"));
  }
  uint64_t released = 0, paused_for = 0;
  {
    absl::MutexLock l(&job->replacement.mu);
    Replacement& r = job->replacement;
    if (r.committed) {
      return absl::FailedPreconditionError(
          absl::StrCat("epoch: placement epoch ", r.epoch, " of job ", job->id,
                       " is committed on shard ", options_.shard_id));
    }
    // Nothing paused, or a later pause than this ABORT knows: OK, unchanged.
    if (r.epoch == 0 || r.epoch > req.epoch()) return absl::OkStatus();
    paused_for = r.epoch;
    released = internal::LiftPause(*job);
  }
  ReleaseBytes(released);
  if (job->checkpointing) checkpointer_->RemovePrepared(job->id);
  job->held_pushes.ResumeAll();  // the pushes the pause held go on now
  spdlog::info(
      "job {}: placement epoch {} aborted on shard {}; the job goes on under "
      "epoch {}",
      job->id, paused_for, options_.shard_id, job->placement.epoch());
  return absl::OkStatus();
}

}  // namespace ps
