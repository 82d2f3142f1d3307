#include "server/coordinator/job_scaling.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "server/coordinator/data_plan.h"
#include "spdlog/spdlog.h"

namespace ps {

bool ScaleInProgress(const JobTable::Job& job) {
  const ScaleStatus& s = job.status.scale();
  return s.target_workers() != 0 && s.reached_s() == 0;
}

absl::Status CheckRunning(const JobTable::Job& job) {
  const JobStatus& status = job.status;
  if (status.state() == RUNNING) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "job_id: job ", status.job_id(), " is ", JobState_Name(status.state()),
      job.registering ? " (starting)" : "", "; only a running job scales"));
}

absl::Status CheckScale(const JobTable::Job& job, uint32_t workers) {
  const JobStatus& status = job.status;
  const std::string& id = status.job_id();
  PS_RETURN_IF_ERROR(CheckRunning(job));
  if (workers == 0) {
    return absl::InvalidArgumentError("workers: must be >= 1");
  }
  const uint32_t slots = RankSlots(status.spec());
  if (workers > slots) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "workers: %d is past job %s's max_workers %d (JobSpec.max_workers, "
        "set at submit, bounds the growth)",
        workers, id, slots));
  }
  if (status.spec().model().has_custom()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job_id: job ", id,
                     " trains a custom model: its workers join it by job id"));
  }
  if (status.spec().on_worker_failure() != SHRINK) {
    return absl::FailedPreconditionError(absl::StrCat(
        "on_worker_failure: job ", id, " runs under ",
        WorkerFailurePolicy_Name(status.spec().on_worker_failure()),
        "; scaling needs SHRINK (a rank that leaves would fail the job)"));
  }
  if (ScaleInProgress(job) && workers != job.active.size()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "workers: job %s is still scaling to %d workers (%d active); wait "
        "for it, or scale to %d to stop it there",
        id, status.scale().target_workers(), job.active.size(),
        job.active.size()));
  }
  return absl::OkStatus();
}

void StartScale(JobTable::Job& job, uint32_t workers, absl::Time now) {
  ScaleStatus& s = *job.status.mutable_scale();
  s.Clear();
  s.set_target_workers(workers);
  s.set_from_workers(static_cast<uint32_t>(job.active.size()));
  s.set_requested_s(UnixSeconds(now));
  spdlog::info("job {}: scaling from {} to {} workers", job.id(),
               job.active.size(), workers);
  UpdateScale(job, now);
}

std::vector<uint32_t> LeavingRanks(const JobTable::Job& job) {
  const uint32_t target = job.status.scale().target_workers();
  if (!ScaleInProgress(job) || job.active.size() <= target) return {};
  std::vector<uint32_t> leaving(job.active.begin(), job.active.end());
  leaving.erase(leaving.begin(), leaving.begin() + target);
  return leaving;
}

size_t StaffedRanks(const JobTable::Job& job) {
  if (!UsesElasticData(job.status.spec())) return job.active.size();
  size_t staffed = 0;
  for (uint32_t rank = 0; rank < job.rank_worker.size(); ++rank) {
    staffed += !job.rank_worker[rank].empty() || job.active.count(rank) > 0;
  }
  return staffed;
}

std::vector<uint32_t> DataMembers(const JobTable::Job& job) {
  std::vector<uint32_t> members;
  for (uint32_t rank = 0; rank < job.rank_worker.size(); ++rank) {
    if (!job.rank_worker[rank].empty()) members.push_back(rank);
  }
  // A scale down keeps the lowest ranks; the others read no more, even
  // while their workers have not unregistered yet.
  const uint32_t target = job.status.scale().target_workers();
  if (target > 0 && members.size() > target) members.resize(target);
  return members;
}

std::optional<uint32_t> SlotToFill(const JobTable::Job& job) {
  if (job.status.state() != RUNNING || !ScaleInProgress(job) ||
      StaffedRanks(job) >= job.status.scale().target_workers()) {
    return std::nullopt;
  }
  for (uint32_t rank = 0; rank < job.rank_worker.size(); ++rank) {
    if (job.rank_worker[rank].empty() && job.active.count(rank) == 0) {
      return rank;
    }
  }
  return std::nullopt;
}

void FillSlot(JobTable::Job& job, uint32_t rank, const std::string& worker_id,
              const std::string& name) {
  job.rank_worker[rank] = worker_id;
  job.rank_name[rank] = name;
  job.rank_finished[rank] = false;
  // An elastic data job's joiner counts from the next segment of its plan.
  if (!UsesElasticData(job.status.spec())) job.active.insert(rank);
  while (job.status.workers_size() <= static_cast<int>(rank)) {
    job.status.add_workers("");
  }
  job.status.set_workers(static_cast<int>(rank), name);
  job.status.set_reason(absl::StrFormat(
      "%s joined at step %d (scale to %d)", WorkerLabel(worker_id, rank, name),
      job.status.progress().step(), job.status.scale().target_workers()));
  spdlog::info("job {}: {}", job.id(), job.status.reason());
}

void UpdateScale(JobTable::Job& job, absl::Time now) {
  if (job.status.scale().target_workers() == 0) return;  // never scaled
  ScaleStatus& s = *job.status.mutable_scale();
  s.set_active_workers(static_cast<uint32_t>(job.active.size()));
  if (s.reached_s() == 0 && job.active.size() == s.target_workers()) {
    s.set_reached_s(UnixSeconds(now));
    spdlog::info("job {}: scaled to {} workers in {:.2f} s", job.id(),
                 s.target_workers(), s.reached_s() - s.requested_s());
  }
}

void LogLearningRate(const JobTable::Job& job) {
  const JobSpec& spec = job.status.spec();
  if (spec.lr_rule() != LR_RULE_LINEAR || spec.num_workers() == 0) return;
  const double lr = spec.optimizer().learning_rate();
  const size_t active = job.active.size();
  // BSP: a step sums the active workers' pushes; ASP/SSP: each push is
  // applied alone, a round of them (one per active worker) the global batch.
  const bool bsp = spec.consistency().mode() == BSP;
  const double scale = static_cast<double>(active) / spec.num_workers();
  // Sparse tables have their own optimizers, scaled the same way.
  std::string tables;
  for (const TableSpec& t : spec.tables()) {
    const double table_lr = t.optimizer().learning_rate();
    absl::StrAppend(
        &tables,
        absl::StrFormat("; table %s: %g x %d/%d = %g", t.name(), table_lr,
                        active, spec.num_workers(), table_lr * scale));
  }
  // %g: a float's learning rate printed as it was written (0.01, not
  // 0.009999999776482582).
  spdlog::info(
      "job {}: {} workers {}: learning rate {:g} x {}/{} = {:g}{} "
      "(lr_rule LR_RULE_LINEAR)",
      job.id(), active, bsp ? "per step" : "active, each push", lr, active,
      spec.num_workers(), lr * scale, tables);
}

}  // namespace ps
