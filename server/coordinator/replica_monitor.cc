#include "server/coordinator/replica_monitor.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"

namespace ps {

ReplicaMonitor::ReplicaMonitor(Options options)
    : options_(std::move(options)),
      missed_(options_.num_shards, 0),
      epoch_(options_.epoch),
      failed_(options_.failed) {}

ReplicaMonitor::~ReplicaMonitor() { Stop(); }

void ReplicaMonitor::Arm() {
  absl::MutexLock l(&mu_);
  if (armed_ || stop_) return;
  armed_ = true;
  spdlog::info(
      "coordinator: shard heartbeats every {} for replicated jobs "
      "(epoch {}, failed shards [{}])",
      absl::FormatDuration(options_.interval), epoch_,
      absl::StrJoin(failed_, ", "));
  thread_ = std::thread([this] { Loop(); });
}

void ReplicaMonitor::Stop() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void ReplicaMonitor::Loop() {
  while (true) {
    const absl::Time next = absl::Now() + options_.interval;
    Beat(absl::Now());
    absl::MutexLock l(&mu_);
    auto stopping = [this]()
                        ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
    if (mu_.AwaitWithDeadline(absl::Condition(&stopping), next)) return;
  }
}

bool ReplicaMonitor::FailedLocked(uint32_t shard) const {
  return std::find(failed_.begin(), failed_.end(), shard) != failed_.end();
}

SetReplicaViewRequest ReplicaMonitor::ViewLocked() const {
  SetReplicaViewRequest view;
  view.set_epoch(epoch_);
  for (uint32_t f : failed_) view.add_failed(f);
  for (std::string& a : options_.addresses()) view.add_addresses(std::move(a));
  return view;
}

void ReplicaMonitor::Beat(absl::Time now) {
  absl::MutexLock beat(&beat_mu_);
  SetReplicaViewRequest view;
  {
    absl::MutexLock l(&mu_);
    view = ViewLocked();
  }
  std::vector<uint32_t> dead;
  std::vector<uint32_t> failed(view.failed().begin(), view.failed().end());
  // A killed shard refuses the connection at once; a hung one gets the
  // whole window of `misses` beats.
  const absl::Time deadline = now + options_.interval * options_.misses;
  for (uint32_t s = 0; s < options_.num_shards; ++s) {
    const bool was_failed =
        std::find(failed.begin(), failed.end(), s) != failed.end();
    // Failed shards hear the view too (best effort): one still alive learns
    // that it is fenced and stops serving.
    absl::Status st = options_.send(s, view, deadline);
    if (was_failed) continue;
    if (st.ok()) {
      missed_[s] = 0;
    } else if (++missed_[s] == options_.misses) {
      spdlog::warn("coordinator: shard {} missed {} heartbeats: {}", s,
                   options_.misses, st.ToString());
      dead.push_back(s);
    }
  }
  if (!dead.empty()) FailOver(dead, now);
}

bool ReplicaMonitor::FailOver(const std::vector<uint32_t>& dead,
                              absl::Time now) {
  uint64_t epoch;
  std::vector<uint32_t> failed;
  {
    absl::MutexLock l(&mu_);
    epoch = epoch_ + 1;
    failed = failed_;
  }
  failed.insert(failed.end(), dead.begin(), dead.end());
  if (failed.size() >= options_.num_shards) {
    spdlog::error(
        "coordinator: every shard would be failed; not failing "
        "over [{}]",
        absl::StrJoin(dead, ", "));
    return false;
  }
  // Durable before anyone is told: a restarted coordinator never hands out
  // an older epoch.
  if (absl::Status st = options_.commit(epoch, failed); !st.ok()) {
    spdlog::error(
        "coordinator: failover of shards [{}] not committed, "
        "retrying at the next heartbeat: {}",
        absl::StrJoin(dead, ", "), st.ToString());
    for (uint32_t s : dead) missed_[s] = options_.misses - 1;
    return false;
  }
  SetReplicaViewRequest view;
  {
    absl::MutexLock l(&mu_);
    epoch_ = epoch;
    failed_ = failed;
    view = ViewLocked();
  }
  std::vector<std::string> redirected = options_.addresses();
  Redirect(&redirected);
  for (uint32_t s : dead) {
    spdlog::warn(
        "coordinator: shard {} failed over at epoch {}; its chunks "
        "are served at {}",
        s, epoch, redirected[s]);
  }
  const absl::Time deadline = now + options_.interval * options_.misses;
  for (uint32_t s = 0; s < options_.num_shards; ++s) {
    (void)options_.send(s, view, deadline);
  }
  return true;
}

uint64_t ReplicaMonitor::epoch() const {
  absl::MutexLock l(&mu_);
  return epoch_;
}

std::vector<uint32_t> ReplicaMonitor::failed() const {
  absl::MutexLock l(&mu_);
  return failed_;
}

uint32_t ReplicaMonitor::live_shards() const {
  absl::MutexLock l(&mu_);
  return options_.num_shards - static_cast<uint32_t>(failed_.size());
}

void ReplicaMonitor::Redirect(std::vector<std::string>* addresses) const {
  absl::MutexLock l(&mu_);
  const uint32_t n = static_cast<uint32_t>(addresses->size());
  const std::vector<std::string> original = *addresses;
  for (uint32_t s : failed_) {
    if (s >= n) continue;
    for (uint32_t j = 1; j < n; ++j) {
      const uint32_t t = (s + j) % n;
      if (!FailedLocked(t)) {
        (*addresses)[s] = original[t];
        break;
      }
    }
  }
}

}  // namespace ps
