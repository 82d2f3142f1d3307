// JobCoordinator's live re-placement of a job's dense chunks (`psctl scale
// JOB --shards=N` or `--drain=K`): the checks, the shards it ends on, the
// thread that runs the Resharder, its commit into the store, and what a
// restarted coordinator does with a re-placement it was in the middle of.
#include <algorithm>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/job_scaling.h"
#include "server/coordinator/placement.h"
#include "server/coordinator/replica_monitor.h"
#include "spdlog/spdlog.h"

namespace ps {
namespace {

bool ReshardInProgress(const JobStatus& status) {
  const ReshardStatus& r = status.reshard();
  return r.target_shards() != 0 && r.reached_s() == 0 &&
         !absl::StartsWith(r.phase(), "aborted") &&
         !absl::StartsWith(r.phase(), "failed");
}

// What is wrong with the request on its own: `shards` outside the
// cluster, or a `drain` id past it or named twice.
absl::Status CheckRequest(const ScaleJobRequest& request, uint32_t num_shards) {
  const uint32_t shards = request.shards();
  if (request.drain_size() == 0 && (shards == 0 || shards > num_shards)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shards: %d is outside [1, %d] (the cluster's shards)",
                        shards, num_shards));
  }
  std::vector<bool> named(num_shards, false);
  for (int i = 0; i < request.drain_size(); ++i) {
    const uint32_t k = request.drain(i);
    if (k >= num_shards) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "drain: shard %d is past the cluster's %d shards", k, num_shards));
    }
    if (named[k]) {
      return absl::InvalidArgumentError(
          absl::StrFormat("drain: shard %d named twice", k));
    }
    named[k] = true;
  }
  return absl::OkStatus();
}

// What keeps `job` from being re-placed now (`field`: the request's).
absl::Status CheckReshard(const JobTable::Job& job, const char* field,
                          bool can_reach_shards) {
  const JobStatus& status = job.status;
  const JobSpec& spec = status.spec();
  const std::string& id = status.job_id();
  PS_RETURN_IF_ERROR(CheckRunning(job));
  auto refuse = [&](const char* refused, const std::string& why) {
    return absl::FailedPreconditionError(
        absl::StrCat(refused, ": job ", id, " ", why,
                     "; its shards cannot be changed live (yet)"));
  };
  if (!can_reach_shards) {
    return absl::FailedPreconditionError(absl::StrCat(
        field, ": this coordinator has no Reshard call to the shards"));
  }
  // Rows move with a BSP job of one copy (server/internal/reshard_tables.h).
  if (spec.tables_size() > 0 && spec.replication() > 1) {
    return refuse("replication", "has sparse tables and replicas");
  }
  if (spec.tables_size() > 0 && spec.consistency().mode() != BSP &&
      spec.consistency().mode() != CONSISTENCY_UNSPECIFIED) {
    return refuse("consistency.mode", "has sparse tables and is not BSP");
  }
  if (spec.replication() > 1 && spec.consistency().mode() != BSP) {
    // Its backups trail its primaries with no step to meet at.
    return refuse("replication", "has replicas and is not BSP");
  }
  if (spec.model().has_custom()) {
    return refuse("model.custom", "trains a custom (Python) model");
  }
  if (ReshardInProgress(status)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: job %s is still moving to %d shards (%s); wait for it", field, id,
        status.reshard().target_shards(), status.reshard().phase()));
  }
  if (ScaleInProgress(job)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: job %s is still scaling to %d workers; wait for it", field, id,
        status.scale().target_workers()));
  }
  return absl::OkStatus();
}

std::string ShardList(const std::vector<uint32_t>& shards) {
  return absl::StrCat("[", absl::StrJoin(shards, ", "), "]");
}

// The shards of job `id` after `request` (checked by CheckRequest), from
// `before` (ascending). `shards` grows the set by the lowest ids it lacks
// or shrinks it by its highest; `drain` takes its ids out:
// FAILED_PRECONDITION for one the job does not use, or for all of them.
absl::StatusOr<std::vector<uint32_t>> TargetShards(
    const std::string& id, const std::vector<uint32_t>& before,
    const ScaleJobRequest& request) {
  std::vector<uint32_t> target = before;
  if (request.drain_size() == 0) {
    const uint32_t n = request.shards();
    if (n < target.size()) target.resize(n);
    for (uint32_t s = 0; target.size() < n; ++s) {
      if (!std::binary_search(before.begin(), before.end(), s)) {
        target.push_back(s);
      }
    }
    std::sort(target.begin(), target.end());
    return target;
  }
  for (uint32_t k : request.drain()) {
    auto it = std::lower_bound(target.begin(), target.end(), k);
    if (it == target.end() || *it != k) {
      return absl::FailedPreconditionError(
          absl::StrFormat("drain: job %s does not use shard %d (its shards: "
                          "%s)",
                          id, k, ShardList(before)));
    }
    target.erase(it);
  }
  if (target.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "drain: %s is every shard job %s uses; at least one must stay",
        ShardList(before), id));
  }
  return target;
}

// The shards a move ends on (`target_shard_ids`, or the first
// `target_shards`).
std::vector<uint32_t> TargetSet(const ReshardStatus& s) {
  std::vector<uint32_t> set(s.target_shard_ids().begin(),
                            s.target_shard_ids().end());
  if (set.empty()) {
    set.resize(s.target_shards());
    std::iota(set.begin(), set.end(), 0);
  }
  return set;
}

// FAILED_PRECONDITION naming the shard when a replicated job's shard,
// before or after the move, is failed over or joining in `replicas` (null:
// no monitor).
absl::Status CheckCopiesInService(const JobTable::Job& job,
                                  const ReplicaMonitor* replicas,
                                  const std::vector<uint32_t>& before,
                                  const std::vector<uint32_t>& target) {
  if (job.status.spec().replication() <= 1 || replicas == nullptr) {
    return absl::OkStatus();
  }
  // Their copies are not in sync: the move waits for them to rejoin (the
  // shards check it again at PAUSE and PREPARE).
  const ReplicaSets sets = replicas->sets();
  for (const auto* set : {&before, &target}) {
    for (uint32_t s : *set) {
      const bool failed = absl::c_linear_search(sets.failed, s);
      if (!failed && !absl::c_linear_search(sets.joining, s)) continue;
      return absl::FailedPreconditionError(absl::StrFormat(
          "shards: shard %d is %s (replica epoch %d); replicated job %s "
          "moves only with every shard it uses in service",
          s, failed ? "failed over" : "joining", replicas->epoch(), job.id()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status JobCoordinator::StartReshard(Job& job,
                                          const ScaleJobRequest& request,
                                          ScaleJobResponse* response) {
  PS_RETURN_IF_ERROR(CheckRequest(request, num_shards_));
  PS_RETURN_IF_ERROR(CheckReshard(job,
                                  request.drain_size() > 0 ? "drain" : "shards",
                                  static_cast<bool>(options_.reshard)));
  const std::vector<uint32_t> before = ShardSet(job.status.spec(), num_shards_);
  PS_ASSIGN_OR_RETURN(const std::vector<uint32_t> target,
                      TargetShards(job.id(), before, request));
  PS_RETURN_IF_ERROR(
      CheckCopiesInService(job, replicas_.get(), before, target));
  const Placement& from = job.status.placement();
  PS_ASSIGN_OR_RETURN(Placement to, RePlaceChunksOnto(from, target));
  // The rows follow the chunks onto the target set (by ShardForId's index
  // into it: the rows whose owner changes move).
  to.clear_table_shards();
  if (job.status.spec().tables_size() > 0) {
    for (uint32_t s : target) to.add_table_shards(s);
  }
  ReshardStatus status;
  status.set_target_shards(static_cast<uint32_t>(target.size()));
  status.set_from_shards(static_cast<uint32_t>(before.size()));
  if (!IsFirstShards(before) || !IsFirstShards(target)) {
    for (uint32_t s : before) status.add_from_shard_ids(s);
    for (uint32_t s : target) status.add_target_shard_ids(s);
  }
  status.set_requested_s(UnixSeconds(options_.clock()));
  uint32_t chunks = 0;
  uint64_t bytes = 0;
  CountMoves(from, to, &chunks, &bytes);
  status.set_moved_chunks(chunks);  // psctl scale prints what will move
  status.set_moved_bytes(bytes);
  if (chunks == 0 && target == before) {
    // Nothing moves: no pause, no new epoch.
    status.set_reached_s(status.requested_s());
    status.set_epoch(from.epoch());
    status.set_phase("done");
  } else {
    status.set_phase("pausing");
    spdlog::info(
        "job {}: re-placing from shards {} to {} ({} chunks, {:.1f} MB "
        "move)",
        job.id(), ShardList(before), ShardList(target), chunks, bytes / 1e6);
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
    SetShardSet(TargetSet(s), job->status.mutable_spec());
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
  struct Pending {
    std::string job_id;
    ReshardStatus status;
    Placement placement;  // the stored one: the new one once committed
  };
  std::vector<Pending> pending;
  {
    absl::MutexLock lock(&mu_);
    for (const std::unique_ptr<Job>& job : jobs_.all()) {
      if (!job->Ended() && ReshardInProgress(job->status)) {
        pending.push_back(
            {job->id(), job->status.reshard(), job->status.placement()});
      }
    }
  }
  if (pending.empty()) return;
  for (auto& [job_id, status, placement] : pending) {
    Resharder resharder = MakeResharder(job_id);
    // "committing" was stored with the new placement: finish it (the same
    // roll forward as Resharder::Run's, shards that restarted since
    // included); before that nothing was committed: the shards drop what
    // they prepared.
    const bool committed = status.phase() == "committing";
    std::vector<uint32_t> late;
    absl::Status st =
        committed
            ? resharder.CommitAll(job_id, placement, status.pause_step(), &late)
            : resharder.AbortAll(job_id, status.epoch());
    if (committed && st.ok()) {
      status.set_phase("done");
      status.set_reached_s(UnixSeconds(options_.clock()));
      for (uint32_t s : late) status.add_late_shards(s);
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
