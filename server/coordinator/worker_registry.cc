#include "server/coordinator/worker_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ps {

void CompletedPolls::Add(std::function<void(absl::Status)> done,
                         absl::Status status) {
  done_.emplace_back(std::move(done), std::move(status));
}

void CompletedPolls::Run() {
  for (auto& [callback, status] : done_) callback(std::move(status));
  done_.clear();
}

WorkerRegistry::Worker& WorkerRegistry::Add(const std::string& name,
                                            absl::Time now) {
  auto worker = std::make_unique<Worker>();
  worker->seq = next_seq_++;
  worker->id = absl::StrCat("w-", worker->seq);
  worker->name = name;
  worker->last_seen = now;
  Worker& w = *worker;
  workers_[w.id] = std::move(worker);
  return w;
}

WorkerRegistry::Worker& WorkerRegistry::Restore(const std::string& id,
                                                const std::string& name,
                                                uint64_t seq, absl::Time now) {
  auto worker = std::make_unique<Worker>();
  worker->id = id;
  worker->name = name;
  worker->seq = seq;
  worker->last_seen = now;
  worker->restored = true;
  Worker& w = *worker;
  workers_[id] = std::move(worker);
  return w;
}

std::vector<const WorkerRegistry::Worker*> WorkerRegistry::InOrder() const {
  std::vector<const Worker*> all;
  for (const auto& [id, worker] : workers_) all.push_back(worker.get());
  std::sort(all.begin(), all.end(),
            [](const Worker* a, const Worker* b) { return a->seq < b->seq; });
  return all;
}

WorkerRegistry::Worker* WorkerRegistry::Find(const std::string& id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : it->second.get();
}

std::unique_ptr<WorkerRegistry::Worker> WorkerRegistry::Remove(
    const std::string& id) {
  auto it = workers_.find(id);
  if (it == workers_.end()) return nullptr;
  std::unique_ptr<Worker> worker = std::move(it->second);
  workers_.erase(it);
  return worker;
}

std::vector<std::string> WorkerRegistry::IdsNamed(
    const std::string& name) const {
  std::vector<std::string> ids;
  for (const auto& [id, worker] : workers_) {
    if (worker->name == name) ids.push_back(id);
  }
  return ids;
}

std::vector<WorkerRegistry::Worker*> WorkerRegistry::IdleInOrder() {
  std::vector<Worker*> idle;
  for (auto& [id, worker] : workers_) {
    if (worker->job_id.empty()) idle.push_back(worker.get());
  }
  std::sort(idle.begin(), idle.end(),
            [](const Worker* a, const Worker* b) { return a->seq < b->seq; });
  return idle;
}

std::vector<WorkerRegistry::Silent> WorkerRegistry::SilentAt(
    absl::Time now, absl::Duration timeout) const {
  std::vector<std::pair<uint64_t, Silent>> found;
  for (const auto& [id, worker] : workers_) {
    if (worker->registering) continue;
    const absl::Duration silent = now - worker->last_seen;
    if (silent >= timeout) found.push_back({worker->seq, {id, silent}});
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Silent> lost;
  for (auto& [seq, s] : found) lost.push_back(std::move(s));
  return lost;
}

void WorkerRegistry::AssignRank(Worker& worker, const std::string& job_id,
                                uint32_t rank, uint64_t start_step) {
  worker.job_id = job_id;
  worker.rank = rank;
  worker.start_step = start_step;
}

void WorkerRegistry::ReleaseFromJob(const std::vector<std::string>& worker_ids,
                                    const std::string& job_id,
                                    const std::string& abort_reason) {
  for (const std::string& worker_id : worker_ids) {
    Worker* worker = Find(worker_id);
    if (worker == nullptr || worker->job_id != job_id) continue;
    worker->job_id.clear();
    if (!abort_reason.empty()) worker->abort_reason = abort_reason;
  }
}

void WorkerRegistry::Park(Worker& worker, GetAssignmentResponse* response,
                          std::function<void(absl::Status)> done,
                          absl::Time deadline) {
  worker.poll_done = std::move(done);
  worker.poll_response = response;
  worker.poll_deadline = deadline;
}

void WorkerRegistry::CompletePoll(Worker& worker, absl::Status status,
                                  CompletedPolls& done) {
  if (!worker.poll_done) return;
  done.Add(std::move(worker.poll_done), std::move(status));
  worker.poll_done = nullptr;
  worker.poll_response = nullptr;
}

void WorkerRegistry::ExpirePolls(absl::Time now, CompletedPolls& done) {
  for (auto& [id, worker] : workers_) {
    if (worker->poll_done && worker->poll_deadline <= now) {
      CompletePoll(*worker, absl::OkStatus(), done);
    }
  }
}

void WorkerRegistry::CompleteAllPolls(const absl::Status& status,
                                      CompletedPolls& done) {
  for (auto& [id, worker] : workers_) CompletePoll(*worker, status, done);
}

}  // namespace ps
