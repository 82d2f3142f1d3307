#include "server/coordinator/job_table.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"

namespace ps {

double UnixSeconds(absl::Time t) {
  return absl::ToDoubleSeconds(t - absl::UnixEpoch());
}

std::string WorkerLabel(const std::string& id, uint32_t rank,
                        const std::string& name) {
  return absl::StrFormat("worker %s (rank %d, %s)", id, rank, name);
}

bool JobTable::Job::Ended() const {
  return status.state() == SUCCEEDED || status.state() == FAILED ||
         status.state() == CANCELLED;
}

uint32_t JobTable::Job::Leader() const {
  return active.empty() ? 0 : *active.begin();
}

JobTable::Job& JobTable::Add(JobSpec spec, Placement placement,
                             absl::Time now) {
  auto job = std::make_unique<Job>();
  const std::string id = absl::StrFormat("job-%06d", next_job_++);
  job->status.set_job_id(id);
  job->status.set_name(spec.name());
  job->status.set_state(PENDING);
  *job->status.mutable_spec() = std::move(spec);
  *job->status.mutable_placement() = std::move(placement);
  job->status.mutable_progress()->set_test_accuracy(-1);
  job->status.set_submit_time_s(UnixSeconds(now));
  jobs_by_id_[id] = job.get();
  pending_.push_back(job.get());
  jobs_.push_back(std::move(job));
  return *jobs_.back();
}

bool JobTable::Unadd(const std::string& job_id) {
  if (jobs_.empty() || jobs_.back()->id() != job_id || pending_.empty() ||
      pending_.back() != jobs_.back().get()) {
    return false;
  }
  pending_.pop_back();
  jobs_by_id_.erase(job_id);
  jobs_.pop_back();
  --next_job_;
  return true;
}

void JobTable::Restore(std::unique_ptr<Job> job) {
  jobs_by_id_[job->id()] = job.get();
  if (job->status.state() == PENDING && !job->registering) {
    pending_.push_back(job.get());
  }
  jobs_.push_back(std::move(job));
}

JobTable::Job* JobTable::Find(const std::string& job_id) {
  auto it = jobs_by_id_.find(job_id);
  return it == jobs_by_id_.end() ? nullptr : it->second;
}

absl::StatusOr<JobTable::Job*> JobTable::Get(const std::string& job_id) {
  Job* job = Find(job_id);
  if (job == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("job_id: unknown job \"", job_id, "\""));
  }
  return job;
}

void JobTable::List(ListJobsResponse* response) const {
  response->Clear();
  for (const std::unique_ptr<Job>& job : jobs_) {
    *response->add_jobs() = job->status;
  }
}

JobTable::Job* JobTable::PopStartable(size_t idle, const JoinedCount& joined) {
  bool builtin_seen = false;
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    Job* job = *it;
    const size_t n = job->status.spec().num_workers();
    if (job->status.spec().model().has_custom()) {
      if (joined(*job) < n) continue;
    } else {
      if (builtin_seen) continue;  // strictly in submit order
      builtin_seen = true;
      if (idle < n) continue;
    }
    pending_.erase(it);
    return job;
  }
  return nullptr;
}

void JobTable::BeginRegistering(Job& job,
                                const std::vector<std::string>& worker_ids,
                                const std::vector<std::string>& worker_names,
                                uint32_t num_shards) {
  const size_t n = worker_ids.size();
  job.registering = true;
  job.status.set_reason(
      absl::StrFormat("registering on %d shards", num_shards));
  // Slots past n (JobSpec.max_workers) wait for a scale to fill them.
  const size_t slots = std::max<size_t>(n, RankSlots(job.status.spec()));
  job.rank_worker = worker_ids;
  job.rank_worker.resize(slots);
  job.rank_name = worker_names;
  job.rank_name.resize(slots);
  job.rank_finished.assign(slots, false);
  job.active.clear();
  job.status.clear_workers();
  for (uint32_t rank = 0; rank < n; ++rank) {
    job.active.insert(rank);
    job.status.add_workers(worker_names[rank]);
  }
}

void JobTable::ExplainPending(size_t idle_left, const JoinedCount& joined) {
  const Job* first_builtin = nullptr;
  for (Job* job : pending_) {
    JobStatus& status = job->status;
    if (status.spec().model().has_custom()) {
      status.set_reason(
          absl::StrFormat("waiting for workers to join: needs %d, %d joined",
                          status.spec().num_workers(), joined(*job)));
    } else if (first_builtin == nullptr) {
      first_builtin = job;
      status.set_reason(
          absl::StrFormat("waiting for workers: needs %d, %d idle",
                          status.spec().num_workers(), idle_left));
    } else {
      status.set_reason(absl::StrCat("queued behind ", first_builtin->id()));
    }
  }
}

JobTable::Job* JobTable::FindLive(const std::string& name) {
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) {
    if ((*it)->status.name() == name && !(*it)->Ended()) return it->get();
  }
  return nullptr;
}

std::vector<JobTable::Job*> JobTable::SucceededNewestFirst() {
  std::vector<Job*> done;
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) {
    if ((*it)->status.state() == SUCCEEDED) done.push_back(it->get());
  }
  // Stable: equal end times keep the later id first.
  std::stable_sort(done.begin(), done.end(), [](const Job* a, const Job* b) {
    return a->status.end_time_s() > b->status.end_time_s();
  });
  return done;
}

JobTable::Job* JobTable::FindByIdOrName(const std::string& name_or_id) {
  if (Job* job = Find(name_or_id)) return job;
  Job* newest = nullptr;
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) {
    if ((*it)->status.name() != name_or_id) continue;
    if ((*it)->status.state() == SUCCEEDED) return it->get();
    if (newest == nullptr) newest = it->get();
  }
  return newest;
}

bool JobTable::StopRegistering(Job& job) {
  const bool still_starting = job.registering && !job.Ended();
  job.registering = false;
  return still_starting;
}

void JobTable::MarkRunning(Job& job, absl::Time now) {
  job.status.set_state(RUNNING);
  job.status.set_reason("");
  job.status.set_start_time_s(UnixSeconds(now));
  spdlog::info("job {} running on {} workers", job.id(), job.active.size());
}

bool JobTable::End(Job& job, const JobEnd& end, absl::Time now) {
  const bool was_pending = job.status.state() == PENDING && !job.registering;
  job.status.set_state(end.state);
  job.status.set_reason(end.reason);
  job.status.set_end_time_s(UnixSeconds(now));
  if (was_pending) {
    pending_.erase(std::remove(pending_.begin(), pending_.end(), &job),
                   pending_.end());
  }
  if (end.state == FAILED) {
    spdlog::warn("job {} FAILED: {}", job.id(), end.reason);
  } else {
    spdlog::info("job {} {}: {}", job.id(), JobState_Name(end.state),
                 end.reason);
  }
  return !was_pending;
}

std::optional<JobEnd> JobTable::LoseRank(Job& job, uint32_t rank,
                                         const std::string& event) {
  job.rank_worker[rank] = "";
  // A rank that reported finished is done, whatever its worker does next
  // (it exits, or leaves): no loss, under either policy.
  if (job.rank_finished[rank]) {
    spdlog::info("job {}: {} (after its rank finished)", job.id(), event);
    return FinishedIfAllDone(job);
  }
  if (job.status.spec().on_worker_failure() != SHRINK) {
    return JobEnd{FAILED, event};
  }
  job.active.erase(rank);
  if (job.active.empty()) {
    return JobEnd{FAILED, absl::StrCat("every worker lost; last: ", event)};
  }
  spdlog::warn("job {}: {}; continuing with ranks {}", job.id(), event,
               absl::StrJoin(job.active, ","));
  job.status.set_reason(absl::StrCat("shrunk: ", event));
  UpdateSamplesPerS(job);
  return FinishedIfAllDone(job);
}

std::optional<std::pair<JobTable::Job*, uint32_t>> JobTable::FindRejoin(
    const std::string& name) {
  for (const std::unique_ptr<Job>& job : jobs_) {
    if (job->status.state() != RUNNING) continue;
    for (uint32_t rank = 0; rank < job->rank_worker.size(); ++rank) {
      if (job->rank_worker[rank].empty() && !job->rank_finished[rank] &&
          job->rank_name[rank] == name) {
        return std::make_pair(job.get(), rank);
      }
    }
  }
  return std::nullopt;
}

void JobTable::Rejoin(Job& job, uint32_t rank, const std::string& worker_id,
                      uint64_t start_step) {
  job.rank_worker[rank] = worker_id;
  job.active.insert(rank);
  UpdateSamplesPerS(job);
  job.status.set_reason(absl::StrFormat(
      "%s rejoined at step %d",
      WorkerLabel(worker_id, rank, job.rank_name[rank]), start_step));
  spdlog::info("job {}: {}", job.id(), job.status.reason());
}

absl::StatusOr<std::string> JobTable::CheckReport(
    const Job& job, const ProgressReport& report) {
  if (job.status.state() != RUNNING) {
    return absl::StrCat("job ", job.id(), " is ",
                        JobState_Name(job.status.state()), ": ",
                        job.status.reason());
  }
  const uint32_t rank = report.rank();
  if (rank >= job.rank_worker.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rank: %d out of range [0, %d) for job %s", rank,
                        job.rank_worker.size(), job.id()));
  }
  if (job.rank_worker[rank] != report.worker_id()) {
    return absl::StrFormat(
        "worker %s does not hold rank %d of job %s (lost or replaced)",
        report.worker_id(), rank, job.id());
  }
  if (absl::Status s = CheckProgress(report.progress()); !s.ok()) return s;
  return std::string();
}

// The rates and times of a report: finite and >= 0 (the loss and the
// accuracies may be NaN, "not measured", or anything a model gives).
absl::Status JobTable::CheckProgress(const Progress& p) {
  const std::pair<const char*, double> fields[] = {
      {"samples_per_s", p.samples_per_s()}, {"data_s", p.data_s()},
      {"compute_s", p.compute_s()},         {"comm_s", p.comm_s()},
      {"elapsed_s", p.elapsed_s()},
  };
  for (const auto& [name, value] : fields) {
    if (!std::isfinite(value) || value < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "progress.", name, ": ", value, " (must be a finite number >= 0)"));
    }
  }
  return absl::OkStatus();
}

std::optional<JobEnd> JobTable::ApplyReport(Job& job,
                                            const ProgressReport& report) {
  const uint32_t rank = report.rank();
  if (!report.error().empty()) {
    return JobEnd{FAILED, absl::StrCat(WorkerLabel(report.worker_id(), rank,
                                                   job.rank_name[rank]),
                                       " failed: ", report.error())};
  }
  const bool leader = rank == job.Leader();
  if (leader) {
    *job.status.mutable_progress() = report.progress();
    job.leader_samples_per_s = report.progress().samples_per_s();
    UpdateSamplesPerS(job);
  }
  if (!report.finished()) return std::nullopt;
  job.rank_finished[rank] = true;
  return FinishedIfAllDone(job);
}

std::optional<JobEnd> JobTable::FinishedIfAllDone(Job& job) {
  std::vector<uint32_t> running;
  for (uint32_t rank : job.active) {
    if (!job.rank_finished[rank]) running.push_back(rank);
  }
  if (!running.empty()) {
    if (job.rank_finished[job.Leader()]) {
      job.status.set_reason(absl::StrFormat(
          "the leader finished; waiting for ranks [%s] to finish their steps",
          absl::StrJoin(running, ", ")));
    }
    return std::nullopt;
  }
  const Progress& p = job.status.progress();
  std::string reason = absl::StrFormat("finished at step %d", p.step());
  if (p.test_accuracy() >= 0) {
    absl::StrAppendFormat(&reason, ", test accuracy %.4f", p.test_accuracy());
  }
  return JobEnd{SUCCEEDED, std::move(reason)};
}

void JobTable::UpdateSamplesPerS(Job& job) {
  // The leader's rate counts every slot (Assignment.num_workers).
  const uint32_t n = RankSlots(job.status.spec());
  if (n == 0) return;
  job.status.mutable_progress()->set_samples_per_s(job.leader_samples_per_s *
                                                   job.active.size() / n);
}

uint32_t RankSlots(const JobSpec& spec) {
  return std::max(spec.num_workers(), spec.max_workers());
}

}  // namespace ps
