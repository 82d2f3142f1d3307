// Shard: the replicated jobs' entry points (server/shard.h; the rules are
// in server/internal/replicator.h).
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/internal/job.h"
#include "server/internal/replica_view.h"
#include "server/internal/replicator.h"
#include "server/internal/waits.h"
#include "server/shard.h"
#include "spdlog/spdlog.h"

namespace ps {

void Shard::SetReplicaSender(ReplicaSender sender) {
  replicator_->SetSender(std::move(sender));
}

absl::Status Shard::SetReplicaView(const SetReplicaViewRequest& req,
                                   SetReplicaViewResponse* resp) {
  {
    absl::ReaderMutexLock l(&mu_);
    if (shutdown_) return ShuttingDown();
  }
  absl::StatusOr<bool> moved = replica_view_->Set(req);
  resp->set_epoch(replica_view_->epoch());
  if (!moved.ok()) return moved.status();
  if (!*moved) return absl::OkStatus();
  spdlog::info("shard {}: replica view epoch {}, failed shards [{}]",
               options_.shard_id, req.epoch(),
               absl::StrJoin(req.failed(), ", "));
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
      replicator_->Notify(job);
    }
  }
  return absl::OkStatus();
}

absl::Status Shard::Replicate(const ReplicateRequest& req) {
  PS_ASSIGN_OR_RETURN(JobPtr job, FindJob(req.job_id()));
  return internal::ApplyReplica(*job, req);
}

}  // namespace ps
