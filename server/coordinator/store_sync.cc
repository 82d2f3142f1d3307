#include "server/coordinator/store_sync.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ps {
namespace {

using Job = JobTable::Job;
using Worker = WorkerRegistry::Worker;

// The job as stored; spec and placement only when `with_spec` (they never
// change after submit, and the store writes them once).
StoredJob ToStored(const Job& job, bool with_spec) {
  StoredJob stored;
  const JobStatus& s = job.status;
  if (with_spec) {
    stored.status = s;
  } else {
    stored.status.set_job_id(s.job_id());
    stored.status.set_name(s.name());
    stored.status.set_state(s.state());
    stored.status.set_reason(s.reason());
    *stored.status.mutable_progress() = s.progress();
    *stored.status.mutable_workers() = s.workers();
    stored.status.set_submit_time_s(s.submit_time_s());
    stored.status.set_start_time_s(s.start_time_s());
    stored.status.set_end_time_s(s.end_time_s());
    if (s.has_scale()) *stored.status.mutable_scale() = s.scale();
    if (s.has_data_plan()) *stored.status.mutable_data_plan() = s.data_plan();
    if (s.has_reshard()) *stored.status.mutable_reshard() = s.reshard();
    if (s.placement().epoch() > 0) {
      // Re-placed while running (psctl scale --shards): UpdateJob writes
      // the spec (its `shards`) and the placement again.
      *stored.status.mutable_spec() = s.spec();
      *stored.status.mutable_placement() = s.placement();
    }
  }
  stored.registering = job.registering;
  stored.leader_samples_per_s = job.leader_samples_per_s;
  for (size_t rank = 0; rank < job.rank_worker.size(); ++rank) {
    stored.ranks.push_back({job.rank_worker[rank], job.rank_name[rank],
                            job.rank_finished[rank],
                            job.active.count(static_cast<uint32_t>(rank)) > 0});
  }
  return stored;
}

// Bytes that change whenever anything stored of the job changes.
std::string Record(const StoredJob& job) {
  std::string record = job.status.SerializeAsString();
  absl::StrAppend(&record, "|", job.registering, "|", job.leader_samples_per_s);
  for (const StoredJob::Rank& r : job.ranks) {
    absl::StrAppend(&record, "|", r.worker_id, ",", r.worker_name, ",",
                    r.finished, ",", r.active);
  }
  return record;
}

StoredWorker ToStored(const Worker& w) {
  StoredWorker stored;
  stored.id = w.id;
  stored.name = w.name;
  stored.seq = w.seq;
  stored.job_id = w.job_id;
  stored.joined_job = w.joined_job;
  stored.rank = w.rank;
  stored.start_step = w.start_step;
  stored.abort_reason = w.abort_reason;
  return stored;
}

std::string Record(const StoredWorker& w) {
  // Ids and names cannot hold '\0' (proto strings from the wire can, but a
  // collision only costs a redundant write).
  return absl::StrCat(w.name, std::string(1, '\0'), w.seq, "|", w.job_id,
                      std::string(1, '\0'), w.joined_job, std::string(1, '\0'),
                      w.rank, "|", w.start_step, "|", w.abort_reason);
}

std::unique_ptr<Job> FromStored(StoredJob stored) {
  auto job = std::make_unique<Job>();
  job->status = std::move(stored.status);
  job->registering = stored.registering;
  job->leader_samples_per_s = stored.leader_samples_per_s;
  for (uint32_t rank = 0; rank < stored.ranks.size(); ++rank) {
    const StoredJob::Rank& r = stored.ranks[rank];
    job->rank_worker.push_back(r.worker_id);
    job->rank_name.push_back(r.worker_name);
    job->rank_finished.push_back(r.finished);
    if (r.active) job->active.insert(rank);
  }
  return job;
}

}  // namespace

absl::Status StoreSync::Restore(absl::Time now, JobTable& jobs,
                                WorkerRegistry& workers) {
  if (store_ == nullptr) return absl::OkStatus();
  PS_ASSIGN_OR_RETURN(StoredState state, store_->Load());
  for (StoredJob& stored : state.jobs) {
    const std::string id = stored.status.job_id();
    job_stored_[id] = Record(ToStored(*FromStored(stored), false));
    std::unique_ptr<Job> job = FromStored(std::move(stored));
    if (job->Ended()) settled_.insert(id);
    jobs.Restore(std::move(job));
  }
  for (const StoredWorker& stored : state.workers) {
    Worker& w = workers.Restore(stored.id, stored.name, stored.seq, now);
    w.job_id = stored.job_id;
    w.joined_job = stored.joined_job;
    w.rank = stored.rank;
    w.start_step = stored.start_step;
    w.abort_reason = stored.abort_reason;
    worker_stored_[w.id] = Record(stored);
  }
  jobs.set_next_job(state.next_job);
  workers.set_next_seq(state.next_worker_seq);
  next_job_ = state.next_job;
  next_worker_seq_ = state.next_worker_seq;
  return absl::OkStatus();
}

void StoreSync::AddProgress(const std::string& job_id,
                            const Progress& progress) {
  if (store_ != nullptr) progress_.emplace_back(job_id, progress);
}

absl::Status StoreSync::Flush(const JobTable& jobs,
                              const WorkerRegistry& workers) {
  if (store_ == nullptr) return absl::OkStatus();
  StoreChanges changes;
  // What the store will hold once the commit succeeds.
  struct JobRecord {
    std::string id;
    std::string record;
    bool ended;
  };
  std::vector<JobRecord> job_records;
  std::vector<std::pair<std::string, std::string>> worker_records;
  for (const std::unique_ptr<Job>& job : jobs.all()) {
    if (settled_.contains(job->id())) continue;
    StoredJob stored = ToStored(*job, false);
    std::string record = Record(stored);
    auto it = job_stored_.find(job->id());
    if (it == job_stored_.end()) {
      changes.new_jobs.push_back(ToStored(*job, true));
    } else if (it->second != record) {
      changes.changed_jobs.push_back(std::move(stored));
    } else {
      continue;
    }
    job_records.push_back({job->id(), std::move(record), job->Ended()});
  }
  absl::flat_hash_set<std::string> live;
  for (const Worker* w : workers.InOrder()) {
    live.insert(w->id);
    StoredWorker stored = ToStored(*w);
    std::string record = Record(stored);
    auto it = worker_stored_.find(w->id);
    if (it != worker_stored_.end() && it->second == record) continue;
    changes.workers.push_back(std::move(stored));
    worker_records.emplace_back(w->id, std::move(record));
  }
  for (const auto& [id, record] : worker_stored_) {
    if (!live.contains(id)) changes.removed_workers.push_back(id);
  }
  if (jobs.next_job() != next_job_) changes.next_job = jobs.next_job();
  if (workers.next_seq() != next_worker_seq_) {
    changes.next_worker_seq = workers.next_seq();
  }
  changes.progress = std::move(progress_);
  progress_.clear();
  PS_RETURN_IF_ERROR(store_->Commit(changes));
  for (JobRecord& r : job_records) {
    if (r.ended) {
      settled_.insert(r.id);
      job_stored_.erase(r.id);
    } else {
      job_stored_[r.id] = std::move(r.record);
    }
  }
  for (auto& [id, record] : worker_records) worker_stored_[id] = record;
  for (const std::string& id : changes.removed_workers) {
    worker_stored_.erase(id);
  }
  next_job_ = jobs.next_job();
  next_worker_seq_ = workers.next_seq();
  return absl::OkStatus();
}

}  // namespace ps
