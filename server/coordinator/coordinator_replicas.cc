// JobCoordinator: replicated jobs (coordinator.h; the failure detector and
// failover are replica_monitor.h): the monitor's life, its durable epoch,
// a failed shard's rejoin and the addresses of failed-over shards.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/coordinator/coordinator.h"
#include "spdlog/spdlog.h"

namespace ps {
namespace {

std::vector<uint32_t> FromMask(uint64_t mask, uint32_t num_shards) {
  std::vector<uint32_t> out;
  for (uint32_t s = 0; s < num_shards && s < 64; ++s) {
    if (mask & (uint64_t{1} << s)) out.push_back(s);
  }
  return out;
}

absl::StatusOr<uint64_t> ToMask(const std::vector<uint32_t>& shards) {
  uint64_t mask = 0;
  for (uint32_t s : shards) {
    if (s >= 64) {
      return absl::FailedPreconditionError(
          absl::StrCat("shard ", s, ": only shards 0..63 can be failed over"));
    }
    mask |= uint64_t{1} << s;
  }
  return mask;
}

}  // namespace

absl::Status JobCoordinator::StartReplicaMonitor() {
  if (!options_.set_replica_view) return absl::OkStatus();
  ReplicaMonitor::Options o;
  o.num_shards = num_shards_;
  o.interval = options_.shard_heartbeat;
  o.misses = options_.shard_heartbeat_misses;
  o.send = options_.set_replica_view;
  o.commit = [this](uint64_t epoch, const ReplicaSets& sets) {
    return CommitReplicaView(epoch, sets);
  };
  o.addresses = [this] {
    return options_.current_shard_addresses ? options_.current_shard_addresses()
                                            : options_.shard_addresses;
  };
  o.rejoin = [this](uint32_t shard) { return RejoinShard(shard); };
  uint32_t copies = 0;
  {
    absl::MutexLock lock(&mu_);
    if (options_.store != nullptr) {
      PS_ASSIGN_OR_RETURN(StoredReplicaView stored,
                          options_.store->LoadReplicaView());
      o.epoch = stored.epoch;
      o.sets.failed = FromMask(stored.failed_mask, num_shards_);
      o.sets.joining = FromMask(stored.joining_mask, num_shards_);
      o.sets.rejoined = FromMask(stored.rejoined_mask, num_shards_);
    }
    for (const std::unique_ptr<Job>& job : jobs_.all()) {
      if (!job->Ended() && job->status.spec().replication() > 1) {
        copies = std::max(copies, job->status.spec().replication());
      }
    }
  }
  replicas_ = std::make_unique<ReplicaMonitor>(std::move(o));
  if (copies <= 1) return absl::OkStatus();
  const std::vector<uint32_t> failed = replicas_->failed();
  if (options_.own_shard < num_shards_ &&
      std::find(failed.begin(), failed.end(), options_.own_shard) ==
          failed.end()) {
    // Replicated jobs run on and this coordinator just started: its
    // process, and the shard in it, restarted. That shard is empty (or
    // holds a checkpoint's older state): it must serve nothing before it
    // rejoined and caught up, so it is failed over before any view goes
    // out.
    spdlog::warn(
        "coordinator: its own shard {} restarted empty with it while "
        "replicated jobs run: failing it over; it rejoins as a backup and "
        "copies its replicas back",
        options_.own_shard);
    absl::Status st = replicas_->FailNow(options_.own_shard, absl::Now());
    // Every other shard failed: it stays in service (logged).
    if (!st.ok() && !absl::IsFailedPrecondition(st)) return st;
  }
  replicas_->Arm();
  return absl::OkStatus();
}

absl::Status JobCoordinator::CommitReplicaView(uint64_t epoch,
                                               const ReplicaSets& sets) {
  absl::MutexLock lock(&mu_);
  if (options_.store == nullptr) {
    spdlog::warn(
        "coordinator: replica epoch {} kept in memory only (no "
        "state_dir)",
        epoch);
    return absl::OkStatus();
  }
  StoredReplicaView view;
  view.epoch = epoch;
  PS_ASSIGN_OR_RETURN(view.failed_mask, ToMask(sets.failed));
  PS_ASSIGN_OR_RETURN(view.joining_mask, ToMask(sets.joining));
  PS_ASSIGN_OR_RETURN(view.rejoined_mask, ToMask(sets.rejoined));
  StoreChanges changes;
  changes.replica_view = view;
  return options_.store->Commit(changes);
}

absl::Status JobCoordinator::RejoinShard(uint32_t shard) {
  std::vector<RegisterJobRequest> requests;
  {
    absl::MutexLock lock(&mu_);
    for (const std::unique_ptr<Job>& job : jobs_.all()) {
      if (job->status.state() != RUNNING || job->registering ||
          job->status.spec().replication() <= 1) {
        continue;
      }
      RegisterJobRequest& r = requests.emplace_back();
      r.set_job_id(job->id());
      *r.mutable_spec() = job->status.spec();
      *r.mutable_placement() = job->status.placement();
      r.set_num_workers(job->status.spec().num_workers());
      // Its copies come from the live ones: a warm start's file or source
      // job is not needed again.
      r.set_joining(true);
    }
  }
  ShardControl* shards = shard_ops_.control();
  for (const RegisterJobRequest& r : requests) {
    // A shard back from a partition holds the job fenced (closed): it
    // starts again from nothing, like a restarted one.
    PS_RETURN_IF_ERROR(shards->DropJob(shard, r.job_id()));
    if (absl::Status st = shards->RegisterJob(shard, r); !st.ok()) {
      return absl::Status(
          st.code(), absl::StrCat("job ", r.job_id(), ": RegisterJob on shard ",
                                  shard, ": ", st.message()));
    }
  }
  // A job that ended meanwhile was dropped everywhere but maybe not here.
  for (const RegisterJobRequest& r : requests) {
    bool running = false;
    {
      absl::MutexLock lock(&mu_);
      const Job* job = jobs_.Find(r.job_id());
      running = job != nullptr && job->status.state() == RUNNING;
    }
    if (!running) (void)shards->DropJob(shard, r.job_id());
  }
  return absl::OkStatus();
}

void JobCoordinator::MaybeArmReplicas(const JobSpec& spec) {
  if (replicas_ != nullptr && spec.replication() > 1) {
    replicas_->Arm();
  }
}

void JobCoordinator::RedirectFailedShards(
    const Placement& placement, std::vector<std::string>* addresses) const {
  if (replicas_ != nullptr) replicas_->Redirect(&placement, addresses);
}

absl::Status JobCoordinator::RedirectFailedShards(
    const std::string& job_id, std::vector<std::string>* addresses) {
  Placement placement;
  {
    absl::MutexLock lock(&mu_);
    const Job* job = jobs_.Find(job_id);
    if (job == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("job_id: no job \"", job_id, "\""));
    }
    placement = job->status.placement();
  }
  RedirectFailedShards(placement, addresses);
  return absl::OkStatus();
}

void JobCoordinator::RedirectFailedShards(
    std::vector<std::string>* addresses) const {
  if (replicas_ != nullptr) replicas_->Redirect(nullptr, addresses);
}

uint64_t JobCoordinator::replica_epoch() const {
  return replicas_ == nullptr ? 0 : replicas_->epoch();
}

}  // namespace ps
