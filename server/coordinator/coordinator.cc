// JobCoordinator's construction, reload from the store, housekeeping (Tick)
// and shutdown. Its RPCs live by family: coordinator_jobs.cc (jobs and their
// state machine), coordinator_workers.cc (registration, heartbeats, long
// polls) and coordinator_traces.cc (step timelines).
#include "server/coordinator/coordinator.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace ps {
namespace {

// Fills in num_shards from shard_addresses and the clock; INVALID_ARGUMENT
// naming the field.
absl::Status CheckOptions(JobCoordinator::Options& options) {
  if (options.num_shards == 0) {
    options.num_shards = static_cast<uint32_t>(options.shard_addresses.size());
  }
  if (options.num_shards == 0) {
    return absl::InvalidArgumentError(
        "num_shards: must be >= 1 (or list shard_addresses)");
  }
  if (!options.shard_addresses.empty() &&
      options.shard_addresses.size() != options.num_shards) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shard_addresses: %d addresses for num_shards = %d",
                        options.shard_addresses.size(), options.num_shards));
  }
  if (options.heartbeat_interval_ms == 0) {
    return absl::InvalidArgumentError("heartbeat_interval_ms: must be > 0");
  }
  if (options.worker_timeout_ms <= options.heartbeat_interval_ms) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "worker_timeout_ms: %d must exceed heartbeat_interval_ms (%d)",
        options.worker_timeout_ms, options.heartbeat_interval_ms));
  }
  if (!options.clock) options.clock = [] { return absl::Now(); };
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobCoordinator>> JobCoordinator::Create(
    Options options, ShardControl* shards) {
  if (shards == nullptr) {
    return absl::InvalidArgumentError("shards: must not be null");
  }
  PS_RETURN_IF_ERROR(CheckOptions(options));
  std::unique_ptr<JobCoordinator> coordinator(
      new JobCoordinator(std::move(options), shards));
  if (coordinator->options_.store != nullptr) {
    PS_RETURN_IF_ERROR(coordinator->Restore());
  }
  PS_RETURN_IF_ERROR(coordinator->StartReplicaMonitor());
  return coordinator;
}

JobCoordinator::JobCoordinator(Options options, ShardControl* shards)
    : options_(std::move(options)),
      num_shards_(options_.num_shards),
      shard_ops_(shards, num_shards_),
      sync_(options_.store),
      history_(options_.max_history_points) {}

absl::Status JobCoordinator::Restore() {
  {
    absl::MutexLock lock(&mu_);
    restored_at_ = options_.clock();
    PS_RETURN_IF_ERROR(sync_.Restore(restored_at_, jobs_, workers_));
    size_t live = 0;
    for (const std::unique_ptr<Job>& job : jobs_.all()) {
      PS_ASSIGN_OR_RETURN(std::vector<Progress> curve,
                          options_.store->History(job->id()));
      history_.Set(job->id(), std::move(curve));
      if (job->Ended()) continue;
      ++live;
      // Its RegisterJob may or may not have reached every shard.
      if (job->registering) EnqueueRegister(job->id());
    }
    spdlog::info(
        "job store {}: reloaded {} jobs ({} not ended) and {} workers; next "
        "job id number {}",
        options_.store->path(), jobs_.all().size(), live, workers_.size(),
        jobs_.next_job());
    MaybeStartJobs();
    PS_RETURN_IF_ERROR(Persist());
  }
  shard_ops_.Drain();
  FinishStoredReshards();
  return absl::OkStatus();
}

absl::Status JobCoordinator::Persist() {
  absl::Status s = sync_.Flush(jobs_, workers_);
  if (!s.ok()) {
    spdlog::error("{} (kept in memory; written with the next change)",
                  std::string(s.message()));
  }
  return s;
}

void JobCoordinator::NoteContact(Worker& worker, absl::Time now) {
  worker.last_seen = now;
  if (!worker.restored) return;
  worker.restored = false;
  spdlog::info(
      "worker {} ({}) reattached {:.3f} s after the coordinator "
      "reloaded its state{}",
      worker.id, worker.name, absl::ToDoubleSeconds(now - restored_at_),
      worker.job_id.empty() ? ""
                            : absl::StrFormat(" (rank %d of job %s)",
                                              worker.rank, worker.job_id));
}

JobCoordinator::~JobCoordinator() { Shutdown(); }

absl::Status JobCoordinator::ShuttingDown() {
  return absl::UnavailableError("coordinator shutting down");
}

void JobCoordinator::Tick(absl::Time now) {
  CompletedPolls done;
  {
    absl::MutexLock lock(&mu_);
    workers_.ExpirePolls(now, done);
    for (const WorkerRegistry::Silent& s : workers_.SilentAt(
             now, absl::Milliseconds(options_.worker_timeout_ms))) {
      LoseWorker(s.id,
                 absl::StrFormat("no heartbeat for %.1f s",
                                 absl::ToDoubleSeconds(s.silent)),
                 now, done);
    }
    MaybeStartJobs();
    Persist().IgnoreError();  // logged
  }
  done.Run();
  shard_ops_.Drain();
}

void JobCoordinator::Shutdown() {
  CompletedPolls done;
  std::vector<std::thread> reshards;
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
    workers_.CompleteAllPolls(ShuttingDown(), done);
    reshards.swap(reshards_);
  }
  done.Run();
  if (replicas_ != nullptr) replicas_->Stop();
  // A re-placement not committed yet aborts (its commit sees shutdown_).
  for (std::thread& t : reshards) t.join();
}

}  // namespace ps
