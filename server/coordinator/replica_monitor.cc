#include "server/coordinator/replica_monitor.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"

namespace ps {
namespace {

bool Contains(const std::vector<uint32_t>& v, uint32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

void Erase(std::vector<uint32_t>& v, uint32_t x) {
  v.erase(std::remove(v.begin(), v.end(), x), v.end());
}

// Whether shard s's address is another shard's too (a stale address file
// naming a live shard): what answers there is not s.
bool SharesAddress(const SetReplicaViewRequest& view, uint32_t s) {
  if (s >= static_cast<uint32_t>(view.addresses_size())) return false;
  for (int t = 0; t < view.addresses_size(); ++t) {
    if (static_cast<uint32_t>(t) != s &&
        view.addresses(t) == view.addresses(s)) {
      return true;
    }
  }
  return false;
}

}  // namespace

ReplicaMonitor::ReplicaMonitor(Options options)
    : options_(std::move(options)),
      missed_(options_.num_shards, 0),
      deadline_(options_.num_shards, options_.interval * options_.misses),
      incarnation_(options_.num_shards, 0),
      rejoin_error_(options_.num_shards),
      epoch_(options_.epoch),
      sets_(options_.sets) {}

ReplicaMonitor::~ReplicaMonitor() { Stop(); }

void ReplicaMonitor::Arm() {
  absl::MutexLock l(&mu_);
  if (armed_ || stop_) return;
  armed_ = true;
  spdlog::info(
      "coordinator: shard heartbeats every {} for replicated jobs "
      "(epoch {}, failed shards [{}], joining [{}], rejoined [{}])",
      absl::FormatDuration(options_.interval), epoch_,
      absl::StrJoin(sets_.failed, ", "), absl::StrJoin(sets_.joining, ", "),
      absl::StrJoin(sets_.rejoined, ", "));
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
  return Contains(sets_.failed, shard);
}

SetReplicaViewRequest ReplicaMonitor::ViewLocked() const {
  SetReplicaViewRequest view;
  view.set_epoch(epoch_);
  for (uint32_t f : sets_.failed) view.add_failed(f);
  for (uint32_t j : sets_.joining) view.add_joining(j);
  for (uint32_t r : sets_.rejoined) view.add_rejoined(r);
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
  std::vector<uint32_t> back;    // failed shards that answered
  std::vector<uint32_t> behind;  // joining shards some primary still copies
  // (backup, primary): backups a primary could not forward to for lag_ms.
  std::vector<std::pair<uint32_t, uint32_t>> lagging;
  bool all_answered = true;
  const std::vector<uint32_t> failed(view.failed().begin(),
                                     view.failed().end());
  const std::vector<uint32_t> joining(view.joining().begin(),
                                      view.joining().end());
  for (uint32_t s = 0; s < options_.num_shards; ++s) {
    // Failed shards hear the view too (best effort): one still alive learns
    // that it is fenced and stops serving; one that answers rejoins. A
    // killed shard refuses the connection at once; a hung one gets the
    // whole window of `misses` beats (its own: the shards after it do not
    // pay for it).
    SetReplicaViewResponse resp;
    uint64_t before = 0;
    absl::Status st = Send(s, view, &resp, &before);
    if (Contains(failed, s)) {
      if (st.ok() && !SharesAddress(view, s)) back.push_back(s);
      continue;
    }
    if (st.ok() && before != 0 && resp.incarnation() != before) {
      spdlog::warn(
          "coordinator: shard {} answers as a new process (incarnation {}, "
          "was {}): restarted on its address, its replicas are gone",
          s, resp.incarnation(), before);
      all_answered = false;
      dead.push_back(s);
      continue;
    }
    if (st.ok()) {
      missed_[s] = 0;
      for (uint32_t b : resp.behind()) behind.push_back(b);
      // A joining shard is nobody's acting primary: what it says of its
      // forwards dates from before it failed (a fenced primary's), and
      // must not fail a live backup over.
      if (!Contains(joining, s)) {
        for (uint32_t b : resp.lagging()) lagging.push_back({b, s});
      }
      continue;
    }
    all_answered = false;
    if (++missed_[s] == options_.misses) {
      spdlog::warn("coordinator: shard {} missed {} heartbeats: {}", s,
                   options_.misses, st.ToString());
      dead.push_back(s);
    }
  }
  DropLagging(lagging, failed, &dead);
  if (!dead.empty()) {
    (void)FailOver(dead, now);  // logged; a failed commit is retried
    return;
  }
  // Caught up: every shard answered this view and none has a chunk left
  // to copy to it.
  std::vector<uint32_t> caught_up;
  if (all_answered) {
    for (uint32_t j : view.joining()) {
      if (!Contains(behind, j)) caught_up.push_back(j);
    }
  }
  if (!options_.rejoin) back.clear();
  if (!back.empty() || !caught_up.empty()) Readmit(back, caught_up, now);
}

void ReplicaMonitor::DropLagging(
    const std::vector<std::pair<uint32_t, uint32_t>>& lagging,
    const std::vector<uint32_t>& failed, std::vector<uint32_t>* dead) {
  for (const auto& [backup, primary] : lagging) {
    if (backup >= options_.num_shards || Contains(failed, backup) ||
        Contains(*dead, backup) || Contains(*dead, primary)) {
      continue;
    }
    spdlog::warn(
        "coordinator: shard {} fell behind: shard {} could not forward to "
        "it for {}; failing it over (it leaves the acknowledgement sets)",
        backup, primary,
        absl::FormatDuration(
            std::max(options_.interval * options_.misses, options_.min_lag)));
    dead->push_back(backup);
  }
}

void ReplicaMonitor::Readmit(const std::vector<uint32_t>& back,
                             const std::vector<uint32_t>& caught_up,
                             absl::Time now) {
  ReplicaSets next;
  {
    absl::MutexLock l(&mu_);
    next = sets_;
  }
  std::vector<uint32_t> joined;
  for (uint32_t s : back) {
    // Its old state is gone or stale: the jobs start afresh there, and the
    // acting primaries copy them in once it is joining.
    absl::Status st = options_.rejoin(s);
    if (!st.ok()) {
      if (rejoin_error_[s] != st.ToString()) {
        rejoin_error_[s] = st.ToString();
        spdlog::warn(
            "coordinator: failed shard {} answers again but cannot rejoin "
            "yet (retried every heartbeat): {}",
            s, st.ToString());
      }
      continue;
    }
    rejoin_error_[s].clear();
    Erase(next.failed, s);
    Erase(next.rejoined, s);
    next.joining.push_back(s);
    missed_[s] = 0;
    joined.push_back(s);
  }
  for (uint32_t s : caught_up) {
    Erase(next.joining, s);
    next.rejoined.push_back(s);
  }
  if (joined.empty() && caught_up.empty()) return;
  uint64_t epoch = 0;
  if (absl::Status st = Move(next, now, &epoch); !st.ok()) {
    spdlog::error(
        "coordinator: shards [{}] rejoining, [{}] caught up: not committed, "
        "retrying at the next heartbeat: {}",
        absl::StrJoin(joined, ", "), absl::StrJoin(caught_up, ", "),
        st.ToString());
    return;
  }
  for (uint32_t s : joined) {
    spdlog::warn(
        "coordinator: shard {} answers again: it rejoins as a backup at "
        "epoch {}, copying its replicas from the acting primaries",
        s, epoch);
  }
  for (uint32_t s : caught_up) {
    spdlog::info(
        "coordinator: shard {} caught up: a backup again at epoch {} "
        "(acknowledgements wait for it)",
        s, epoch);
  }
}

absl::Status ReplicaMonitor::Move(const ReplicaSets& next, absl::Time now,
                                  uint64_t* epoch) {
  {
    absl::MutexLock l(&mu_);
    *epoch = epoch_ + 1;
  }
  // Durable before anyone is told: a restarted coordinator never hands out
  // an older epoch.
  if (absl::Status st = options_.commit(*epoch, next); !st.ok()) return st;
  SetReplicaViewRequest view;
  {
    absl::MutexLock l(&mu_);
    epoch_ = *epoch;
    sets_ = next;
    view = ViewLocked();
  }
  for (uint32_t s = 0; s < options_.num_shards; ++s) {
    SetReplicaViewResponse ignored;
    uint64_t before = 0;
    (void)Send(s, view, &ignored, &before);
  }
  return absl::OkStatus();
}

absl::Status ReplicaMonitor::Send(uint32_t s, SetReplicaViewRequest& view,
                                  SetReplicaViewResponse* resp,
                                  uint64_t* before) {
  view.set_shard(s);
  view.set_incarnation(incarnation_[s]);
  view.set_lag_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(
      std::max(options_.interval * options_.misses, options_.min_lag))));
  *before = incarnation_[s];
  // A failed shard's beats stay short: each holds up the beats of the
  // shards after it, and the view that fails it must reach them at once.
  const absl::Duration base = options_.interval * options_.misses;
  const bool failed = std::find(view.failed().begin(), view.failed().end(),
                                s) != view.failed().end();
  if (failed) deadline_[s] = base;
  absl::Status st = options_.send(s, view, absl::Now() + deadline_[s], resp);
  if (absl::IsDeadlineExceeded(st) && !failed) {
    // Slow or silent: the next beat waits longer (a killed psd refuses the
    // connection instead, and misses at its own pace).
    deadline_[s] =
        std::max(base, std::min(options_.max_deadline, deadline_[s] * 2));
  } else if (st.ok()) {
    deadline_[s] = std::max(base, deadline_[s] / 2);
  }
  if (st.ok() && resp->incarnation() != 0) {
    incarnation_[s] = resp->incarnation();
  }
  return st;
}

absl::Status ReplicaMonitor::FailNow(uint32_t shard, absl::Time now) {
  absl::MutexLock beat(&beat_mu_);
  {
    absl::MutexLock l(&mu_);
    if (FailedLocked(shard)) return absl::OkStatus();
  }
  return FailOver({shard}, now);
}

absl::Status ReplicaMonitor::FailOver(const std::vector<uint32_t>& dead,
                                      absl::Time now) {
  ReplicaSets next;
  {
    absl::MutexLock l(&mu_);
    next = sets_;
  }
  for (uint32_t s : dead) {
    Erase(next.joining, s);
    Erase(next.rejoined, s);
    next.failed.push_back(s);
  }
  if (next.failed.size() >= options_.num_shards) {
    const std::string why =
        absl::StrCat("every shard would be failed; not failing over [",
                     absl::StrJoin(dead, ", "), "]");
    spdlog::error("coordinator: {}", why);
    return absl::FailedPreconditionError(why);
  }
  uint64_t epoch = 0;
  if (absl::Status st = Move(next, now, &epoch); !st.ok()) {
    spdlog::error(
        "coordinator: failover of shards [{}] not committed, "
        "retrying at the next heartbeat: {}",
        absl::StrJoin(dead, ", "), st.ToString());
    for (uint32_t s : dead) missed_[s] = options_.misses - 1;
    return st;
  }
  for (uint32_t s : dead) {
    // Where depends on the job: each chunk's first live copy serves it.
    spdlog::warn(
        "coordinator: shard {} failed over at epoch {}; each of its "
        "chunks is served by its first copy left in service",
        s, epoch);
  }
  return absl::OkStatus();
}

uint64_t ReplicaMonitor::epoch() const {
  absl::MutexLock l(&mu_);
  return epoch_;
}

std::vector<uint32_t> ReplicaMonitor::failed() const {
  absl::MutexLock l(&mu_);
  return sets_.failed;
}

ReplicaSets ReplicaMonitor::sets() const {
  absl::MutexLock l(&mu_);
  return sets_;
}

bool ReplicaMonitor::InServiceLocked(uint32_t shard) const {
  return !FailedLocked(shard) && !Contains(sets_.joining, shard) &&
         !Contains(sets_.rejoined, shard);
}

uint32_t ReplicaMonitor::ActingPrimaryLocked(const ChunkPlacement& c,
                                             uint32_t none) const {
  std::vector<uint32_t> copies = {c.shard()};
  copies.insert(copies.end(), c.backups().begin(), c.backups().end());
  for (uint32_t t : copies) {
    if (t < none && InServiceLocked(t)) return t;
  }
  // Only copies that came back are left: the first of them takes over.
  for (uint32_t t : copies) {
    if (t < none && Contains(sets_.rejoined, t) && !FailedLocked(t)) return t;
  }
  return none;
}

void ReplicaMonitor::Redirect(const Placement* placement,
                              std::vector<std::string>* addresses) const {
  absl::MutexLock l(&mu_);
  const uint32_t n = static_cast<uint32_t>(addresses->size());
  const std::vector<std::string> original = *addresses;
  // By shard: the first chunk it is the primary of (null: none).
  std::vector<const ChunkPlacement*> primary_of(n, nullptr);
  if (placement != nullptr) {
    for (const ChunkPlacement& c : placement->chunks()) {
      if (c.shard() < n && primary_of[c.shard()] == nullptr) {
        primary_of[c.shard()] = &c;
      }
    }
  }
  for (uint32_t s = 0; s < n; ++s) {
    if (InServiceLocked(s)) continue;
    uint32_t to = n;
    if (primary_of[s] != nullptr) {
      to = ActingPrimaryLocked(*primary_of[s], n);
    } else if (FailedLocked(s)) {
      for (uint32_t j = 1; j < n && to == n; ++j) {
        if (!FailedLocked((s + j) % n)) to = (s + j) % n;
      }
    }
    if (to < n) (*addresses)[s] = original[to];
  }
}

}  // namespace ps
