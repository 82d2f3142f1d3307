// JobCoordinator: replicated jobs (coordinator.h; the failure detector and
// failover are replica_monitor.h): the monitor's life, its durable epoch,
// and the addresses of failed-over shards.
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/coordinator/coordinator.h"
#include "spdlog/spdlog.h"

namespace ps {

absl::Status JobCoordinator::StartReplicaMonitor() {
  if (!options_.set_replica_view) return absl::OkStatus();
  ReplicaMonitor::Options o;
  o.num_shards = num_shards_;
  o.interval = options_.shard_heartbeat;
  o.misses = options_.shard_heartbeat_misses;
  o.send = options_.set_replica_view;
  o.commit = [this](uint64_t epoch, const std::vector<uint32_t>& failed) {
    return CommitReplicaView(epoch, failed);
  };
  o.addresses = [this] {
    return options_.current_shard_addresses ? options_.current_shard_addresses()
                                            : options_.shard_addresses;
  };
  bool arm = false;
  {
    absl::MutexLock lock(&mu_);
    if (options_.store != nullptr) {
      PS_ASSIGN_OR_RETURN(StoredReplicaView stored,
                          options_.store->LoadReplicaView());
      o.epoch = stored.epoch;
      for (uint32_t s = 0; s < num_shards_ && s < 64; ++s) {
        if (stored.failed_mask & (uint64_t{1} << s)) o.failed.push_back(s);
      }
    }
    for (const std::unique_ptr<Job>& job : jobs_.all()) {
      arm = arm || (!job->Ended() && job->status.spec().replication() > 1);
    }
  }
  replicas_ = std::make_unique<ReplicaMonitor>(std::move(o));
  if (arm) replicas_->Arm();
  return absl::OkStatus();
}

absl::Status JobCoordinator::CommitReplicaView(
    uint64_t epoch, const std::vector<uint32_t>& failed) {
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
  for (uint32_t s : failed) {
    if (s >= 64) {
      return absl::FailedPreconditionError(
          absl::StrCat("shard ", s, ": only shards 0..63 can be failed over"));
    }
    view.failed_mask |= uint64_t{1} << s;
  }
  StoreChanges changes;
  changes.replica_view = view;
  return options_.store->Commit(changes);
}

void JobCoordinator::MaybeArmReplicas(const JobSpec& spec) {
  if (replicas_ != nullptr && spec.replication() > 1) replicas_->Arm();
}

void JobCoordinator::RedirectFailedShards(
    std::vector<std::string>* addresses) const {
  if (replicas_ != nullptr) replicas_->Redirect(addresses);
}

uint64_t JobCoordinator::replica_epoch() const {
  return replicas_ == nullptr ? 0 : replicas_->epoch();
}

}  // namespace ps
