// Shard: the replicated jobs' entry points (server/shard.h; the rules are
// in server/internal/replicator.h).
#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/internal/job.h"
#include "server/internal/reasons.h"
#include "server/internal/replica_view.h"
#include "server/internal/replicator.h"
#include "server/internal/waits.h"
#include "server/shard.h"
#include "spdlog/spdlog.h"

namespace ps {

void Shard::SetReplicaSender(ReplicaSender sender) {
  replicator_->SetSender(sender);
  for (const JobPtr& job : AllJobs()) {
    if (job->table_replicas != nullptr) job->table_replicas->SetSender(sender);
  }
}

namespace {

// The chunks `job` serves here that had a backup in `failed`: they stop
// waiting for it (counted in replica_drops, logged once per job).
void DropFailedBackups(internal::Job& job, const std::vector<uint32_t>& failed,
                       uint64_t epoch) {
  uint64_t dropped = 0;
  for (const std::shared_ptr<internal::Chunk>& c : job.chunks) {
    if (!job.Serves(*c)) continue;
    for (uint32_t b : c->placement.backups()) {
      if (std::find(failed.begin(), failed.end(), b) != failed.end()) {
        ++dropped;
      }
    }
  }
  if (dropped == 0) return;
  job.counters.replica_drops.fetch_add(dropped);
  spdlog::warn(
      "shard {}: job {}: shards [{}] dropped from the "
      "acknowledgement set of {} chunks (failed over at epoch {})",
      job.view->self(), job.id, absl::StrJoin(failed, ", "), dropped, epoch);
}

// The backups that the chunks' forwards (`replicator`) or the tables' (each
// job's TableReplicas) have failed for `lag` (SetReplicaViewResponse.lagging).
std::vector<uint32_t> Lagging(
    const internal::Replicator& replicator,
    const std::vector<std::shared_ptr<internal::Job>>& jobs,
    absl::Duration lag) {
  const absl::Time now = absl::Now();
  std::vector<uint32_t> lagging = replicator.Lagging(lag, now);
  for (const std::shared_ptr<internal::Job>& job : jobs) {
    if (job->table_replicas == nullptr) continue;
    for (uint32_t b : job->table_replicas->Lagging(lag, now)) {
      if (std::find(lagging.begin(), lagging.end(), b) == lagging.end()) {
        lagging.push_back(b);
      }
    }
  }
  return lagging;
}

}  // namespace

absl::Status Shard::SetReplicaView(const SetReplicaViewRequest& req,
                                   SetReplicaViewResponse* resp) {
  resp->Clear();
  {
    absl::ReaderMutexLock l(&mu_);
    if (shutdown_) return ShuttingDown();
  }
  resp->set_incarnation(incarnation_);
  if (req.has_shard() && req.shard() != options_.shard_id) {
    rejected_.Add(internal::kWrongShard);
    return absl::FailedPreconditionError(
        absl::StrCat("shard: the heartbeat is for shard ", req.shard(),
                     " but this is shard ", options_.shard_id,
                     " (a stale address?); nothing changed"));
  }
  std::vector<uint32_t> newly_failed;
  for (uint32_t f : req.failed()) {
    if (!replica_view_->Failed(f)) newly_failed.push_back(f);
  }
  if (req.epoch() > replica_view_->epoch()) {
    // A shard that comes back joins empty: what it acknowledged before it
    // failed no longer counts (before the view moves, so that no forward
    // to it is in flight).
    for (uint32_t j : req.joining()) {
      if (replica_view_->Joining(j)) continue;
      replicator_->ForgetFailures(j);
      for (const JobPtr& job : AllJobs()) {
        if (job->replicated) internal::ForgetAcks(*job, j);
        if (job->table_replicas != nullptr) job->table_replicas->ForgetAcks(j);
      }
    }
  }
  absl::StatusOr<bool> moved = replica_view_->Set(req);
  resp->set_epoch(replica_view_->epoch());
  if (!moved.ok()) return moved.status();
  if (*moved) {
    spdlog::info(
        "shard {}: replica view epoch {}, failed shards [{}], joining [{}], "
        "rejoined [{}]",
        options_.shard_id, req.epoch(), absl::StrJoin(req.failed(), ", "),
        absl::StrJoin(req.joining(), ", "),
        absl::StrJoin(req.rejoined(), ", "));
    ApplyViewChange(req, newly_failed);
  }
  for (uint32_t j : ReplicaBehind()) resp->add_behind(j);
  if (req.lag_ms() > 0) {
    for (uint32_t b :
         Lagging(*replicator_, AllJobs(), absl::Milliseconds(req.lag_ms()))) {
      resp->add_lagging(b);
    }
  }
  return absl::OkStatus();
}

std::vector<uint32_t> Shard::ReplicaBehind() const {
  // The joining shards this shard still copies to.
  std::vector<uint32_t> behind;
  for (const JobPtr& job : AllJobs()) {
    if (!job->replicated || job->waits.is_closed.load()) continue;
    std::vector<uint32_t> lagging = internal::Behind(*job, *replica_view_);
    if (job->table_replicas != nullptr) {
      for (uint32_t j : job->table_replicas->Behind()) lagging.push_back(j);
    }
    for (uint32_t j : lagging) {
      if (std::find(behind.begin(), behind.end(), j) == behind.end()) {
        behind.push_back(j);
      }
    }
  }
  // Joining: not caught up while a chunk held here got no copy yet (its
  // acting primary may be gone: then it must never count as a copy).
  const uint32_t self = options_.shard_id;
  if (replica_view_->Joining(self)) {
    for (const JobPtr& job : AllJobs()) {
      if (!job->replicated || job->waits.is_closed.load()) continue;
      bool copied =
          job->table_replicas == nullptr || job->table_replicas->AllCopied();
      for (const std::shared_ptr<internal::Chunk>& c : job->chunks) {
        copied = copied && c->copied.load();
      }
      if (!copied &&
          std::find(behind.begin(), behind.end(), self) == behind.end()) {
        behind.push_back(self);
      }
    }
  }
  return behind;
}

void Shard::ApplyViewChange(const SetReplicaViewRequest& req,
                            const std::vector<uint32_t>& newly_failed) {
  // Promoted chunks forward to the backups left; failed backups leave the
  // acknowledgement set; the answers they held may go. A shard told that
  // it failed (alive, but silent to the coordinator) is fenced: its waits
  // fail UNAVAILABLE so that the workers find the successor.
  const bool fenced = replica_view_->Failed(options_.shard_id);
  for (const JobPtr& job : AllJobs()) {
    if (!job->replicated) continue;
    if (fenced) {
      internal::CloseJob(
          *job, absl::UnavailableError(absl::StrCat(
                    "shard ", options_.shard_id, " was failed over at epoch ",
                    req.epoch(), "; its chunks are served by a backup")));
    } else {
      DropFailedBackups(*job, newly_failed, req.epoch());
      replicator_->Notify(job);
      if (job->table_replicas != nullptr) job->table_replicas->Wake();
    }
  }
}

absl::Status Shard::UnknownJob(const std::string& job_id) const {
  rejected_.Add(internal::kUnknownJob);
  if (replica_view_->Failed(options_.shard_id) ||
      replica_view_->Joining(options_.shard_id)) {
    // Failed over (a restarted psd), not yet holding the job again: its
    // clients retry and find the acting primary through the coordinator.
    return absl::UnavailableError(absl::StrCat(
        "job_id: no job \"", job_id, "\" on shard ", options_.shard_id,
        ", which was failed over at epoch ", replica_view_->epoch(),
        " (its chunks are served by a backup)"));
  }
  // A psd restarted on its old address may be reached by the workers
  // before the coordinator noticed the restart and failed it over: until
  // the coordinator names this process (a heartbeat, or a job it
  // registered here), "no job" is not final.
  const bool heard = replica_view_->heard();
  const bool in_grace = !heard &&
                        !registered_.load(std::memory_order_relaxed) &&
                        absl::Now() - start_time_ < options_.unknown_job_grace;
  if ((heard && replica_view_->told_incarnation() != incarnation_) ||
      in_grace) {
    return absl::UnavailableError(absl::StrCat(
        "job_id: no job \"", job_id, "\" on shard ", options_.shard_id,
        ", started ", absl::FormatDuration(absl::Now() - start_time_),
        " ago and not yet known to the coordinator; retry"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("job_id: no job \"", job_id, "\" on shard ",
                   options_.shard_id, " (never registered, or dropped)"));
}

absl::Status Shard::Replicate(const ReplicateRequest& req) {
  PS_ASSIGN_OR_RETURN(JobPtr job, FindJob(req.job_id()));
  if (req.has_tables()) return ReplicateTables(*job, req);
  return internal::ApplyReplica(*job, req);
}

}  // namespace ps
