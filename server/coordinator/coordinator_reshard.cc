// JobCoordinator's live re-placement of a job's dense chunks (`psctl scale
// JOB --shards=N`): the checks, the thread that runs the Resharder, its
// commit into the store, and what a restarted coordinator does with a
// re-placement it was in the middle of.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/job_scaling.h"
#include "server/coordinator/placement.h"
#include "spdlog/spdlog.h"

namespace ps {
namespace {

bool ReshardInProgress(const JobStatus& status) {
  const ReshardStatus& r = status.reshard();
  return r.target_shards() != 0 && r.reached_s() == 0 &&
         !absl::StartsWith(r.phase(), "aborted") &&
         !absl::StartsWith(r.phase(), "failed");
}

// What keeps `job` from being re-placed onto `shards` shards now.
absl::Status CheckReshard(const JobTable::Job& job, uint32_t shards,
                          uint32_t num_shards, bool can_reach_shards) {
  const JobStatus& status = job.status;
  const JobSpec& spec = status.spec();
  const std::string& id = status.job_id();
  if (shards == 0 || shards > num_shards) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shards: %d is outside [1, %d] (the cluster's shards)",
                        shards, num_shards));
  }
  PS_RETURN_IF_ERROR(CheckRunning(job));
  auto refuse = [&](const char* field, const std::string& why) {
    return absl::FailedPreconditionError(
        absl::StrCat(field, ": job ", id, " ", why,
                     "; its shards cannot be changed live (yet)"));
  };
  if (!can_reach_shards) {
    return absl::FailedPreconditionError(
        "shards: this coordinator has no Reshard call to the shards");
  }
  if (spec.consistency().mode() != BSP) {
    return refuse(
        "consistency.mode",
        absl::StrCat("runs ", ConsistencyMode_Name(spec.consistency().mode())));
  }
  if (spec.tables_size() > 0) return refuse("tables", "has sparse tables");
  if (spec.wire().has_topk_fraction() && spec.wire().topk_fraction() < 1) {
    // The workers' top-k residuals stay with the client they replace.
    return refuse("wire.topk_fraction", "pushes top-k gradients");
  }
  if (spec.replication() > 1) return refuse("replication", "has replicas");
  if (spec.model().has_custom()) {
    return refuse("model.custom", "trains a custom (Python) model");
  }
  if (ReshardInProgress(status)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "shards: job %s is still moving to %d shards (%s); wait for it", id,
        status.reshard().target_shards(), status.reshard().phase()));
  }
  if (ScaleInProgress(job)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "shards: job %s is still scaling to %d workers; wait for it", id,
        status.scale().target_workers()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status JobCoordinator::StartReshard(Job& job, uint32_t shards,
                                          ScaleJobResponse* response) {
  PS_RETURN_IF_ERROR(CheckReshard(job, shards, num_shards_,
                                  static_cast<bool>(options_.reshard)));
  const Placement& from = job.status.placement();
  PS_ASSIGN_OR_RETURN(Placement to, RePlaceChunks(from, shards));
  const uint32_t before = UsedShards(job.status.spec(), num_shards_);
  ReshardStatus status;
  status.set_target_shards(shards);
  status.set_from_shards(before);
  status.set_requested_s(UnixSeconds(options_.clock()));
  uint32_t chunks = 0;
  uint64_t bytes = 0;
  CountMoves(from, to, &chunks, &bytes);
  if (chunks == 0 && shards == before) {
    // Nothing moves: no pause, no new epoch.
    status.set_reached_s(status.requested_s());
    status.set_epoch(from.epoch());
    status.set_phase("done");
  } else {
    status.set_phase("pausing");
    spdlog::info(
        "job {}: re-placing from {} to {} shards ({} chunks, {:.1f} "
        "MB move)",
        job.id(), before, shards, chunks, bytes / 1e6);
    reshards_.emplace_back([this, id = job.id(), from, to, status] {
      RunReshard(id, from, to, status);
    });
  }
  *job.status.mutable_reshard() = status;
  *response->mutable_reshard() = status;
  return absl::OkStatus();
}

Resharder JobCoordinator::MakeResharder(const std::string& job_id) {
  Resharder::Options options;
  options.num_shards = num_shards_;
  // A pause that cannot complete (a worker missing) is lifted after this
  // (and two step times per step to run to it): the job goes on as it
  // was, and the move may be asked for again.
  options.quiesce_deadline = absl::Seconds(8);
  {
    absl::MutexLock lock(&mu_);
    const Job* job = jobs_.Find(job_id);
    if (job != nullptr && job->status.progress().step() > 0) {
      const Progress& p = job->status.progress();
      options.step_time = absl::Seconds(p.elapsed_s() / p.step());
    }
  }
  Resharder::Hooks hooks;
  hooks.reshard = options_.reshard;
  hooks.clock = [this] { return options_.clock(); };
  hooks.stopping = [this] {
    absl::MutexLock lock(&mu_);
    return shutdown_;
  };
  hooks.addresses = [this] {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> addresses =
        options_.current_shard_addresses ? options_.current_shard_addresses()
                                         : options_.shard_addresses;
    RedirectFailedShards(&addresses);
    return addresses;
  };
  hooks.update = [this, job_id](const ReshardStatus& s) {
    absl::MutexLock lock(&mu_);
    Job* job = jobs_.Find(job_id);
    if (job == nullptr) return;
    *job->status.mutable_reshard() = s;
    Persist().IgnoreError();  // logged
  };
  hooks.commit = [this, job_id](const Placement& placement,
                                const ReshardStatus& s) -> absl::Status {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return ShuttingDown();
    Job* job = jobs_.Find(job_id);
    if (job == nullptr || job->status.state() != RUNNING) {
      return absl::FailedPreconditionError("the job ended meanwhile");
    }
    const JobStatus before = job->status;
    *job->status.mutable_placement() = placement;
    job->status.mutable_spec()->set_shards(s.target_shards());
    *job->status.mutable_reshard() = s;
    absl::Status st = Persist();
    if (!st.ok()) job->status = before;  // not durable: not committed
    return st;
  };
  return Resharder(options, std::move(hooks));
}

void JobCoordinator::RunReshard(const std::string& job_id,
                                const Placement& from, const Placement& to,
                                const ReshardStatus& status) {
  RecordReshardEnd(job_id, MakeResharder(job_id).Run(job_id, from, to, status));
}

void JobCoordinator::RecordReshardEnd(const std::string& job_id,
                                      const ReshardStatus& end) {
  {
    absl::MutexLock lock(&mu_);
    Job* job = jobs_.Find(job_id);
    if (job == nullptr) return;
    *job->status.mutable_reshard() = end;
    if (absl::StartsWith(end.phase(), "failed") &&
        job->status.state() == RUNNING) {
      // Committed in the store but not on every shard: the shards disagree
      // on the placement, and the workers would wait on the ones behind.
      EndJob(*job,
             {FAILED, absl::StrCat("re-placement to ", end.target_shards(),
                                   " shards: ", end.phase())},
             options_.clock());
      MaybeStartJobs();
    }
    Persist().IgnoreError();  // logged
  }
  shard_ops_.Drain();
}

void JobCoordinator::FinishStoredReshards() {
  std::vector<std::pair<std::string, ReshardStatus>> pending;
  {
    absl::MutexLock lock(&mu_);
    for (const std::unique_ptr<Job>& job : jobs_.all()) {
      if (!job->Ended() && ReshardInProgress(job->status)) {
        pending.emplace_back(job->id(), job->status.reshard());
      }
    }
  }
  if (pending.empty()) return;
  for (auto& [job_id, status] : pending) {
    Resharder resharder = MakeResharder(job_id);
    // "committing" was stored with the new placement: finish it; before
    // that nothing was committed: the shards drop what they prepared.
    const bool committed = status.phase() == "committing";
    absl::Status st = committed ? resharder.CommitAll(job_id, status.epoch())
                                : resharder.AbortAll(job_id, status.epoch());
    if (committed && st.ok()) {
      status.set_phase("done");
      status.set_reached_s(UnixSeconds(options_.clock()));
    } else {
      status.set_phase(
          absl::StrCat(committed ? "failed: " : "aborted: ",
                       "the coordinator restarted in the middle",
                       st.ok() ? "" : absl::StrCat("; ", st.message())));
    }
    spdlog::info(
        "job {}: the re-placement to {} shards found at the restart: "
        "{}",
        job_id, status.target_shards(), status.phase());
    RecordReshardEnd(job_id, status);
  }
}

}  // namespace ps
