#include "server/sparse/internal/step_barrier.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "server/internal/quorum.h"

namespace ps {
namespace sparse_internal {

StepBarrier::StepBarrier(ConsistencyMode mode, uint32_t num_workers,
                         uint32_t backup_workers)
    : mode_(mode),
      num_workers_(num_workers),
      backup_workers_(backup_workers),
      active_(num_workers, 1),
      pending_(num_workers),
      pushed_steps_(num_workers, 0),
      claimed_steps_(num_workers, 0) {}

void StepBarrier::SetActive(const std::vector<uint8_t>& active) {
  for (uint32_t w = 0; w < num_workers_ && w < active.size(); ++w) {
    active_[w] = active[w];
  }
}

uint32_t StepBarrier::active_count() const {
  uint32_t n = 0;
  for (uint8_t a : active_) n += a != 0;
  return n;
}

void StepBarrier::Buffer(uint32_t w, TablePushes pushed) {
  pending_bytes_ += pushed.bytes;
  pending_[w] = std::make_unique<TablePushes>(std::move(pushed));
}

bool StepBarrier::StepReady(std::vector<const TablePushes*>* order) const {
  uint32_t active = 0, pushed = 0;
  std::vector<const TablePushes*> pushes;
  for (uint32_t w = 0; w < num_workers_; ++w) {
    if (!active_[w]) continue;
    ++active;
    if (pending_[w] != nullptr) {
      ++pushed;
      pushes.push_back(pending_[w].get());
    }
  }
  if (!internal::BspQuorumReached(active, pushed, backup_workers_)) {
    return false;
  }
  *order = std::move(pushes);
  return true;
}

void StepBarrier::EndStep(bool applied) {
  for (auto& p : pending_) p.reset();
  pending_bytes_ = 0;
  if (applied) ++version_;
}

bool StepBarrier::Claim(uint32_t w, uint64_t step, uint64_t* claimed_before) {
  if (step < claimed_steps_[w]) return false;
  *claimed_before = claimed_steps_[w];
  claimed_steps_[w] = step + 1;
  return true;
}

void StepBarrier::Unclaim(uint32_t w, uint64_t step, uint64_t claimed_before) {
  if (claimed_steps_[w] == step + 1) claimed_steps_[w] = claimed_before;
}

uint64_t StepBarrier::CountApplied(uint32_t w, uint64_t step) {
  pushed_steps_[w] = std::max(pushed_steps_[w], step + 1);
  ++version_;
  const uint64_t slowest = Slowest();
  if (slowest <= evicted_at_) return 0;
  evicted_at_ = slowest;
  return slowest;
}

uint64_t StepBarrier::CountForwarded(uint32_t w, uint64_t step) {
  claimed_steps_[w] = std::max(claimed_steps_[w], step + 1);
  return CountApplied(w, step);
}

uint64_t StepBarrier::Slowest() const {
  return internal::SlowestActive(
      num_workers_, [this](uint32_t w) { return active_[w] != 0; },
      [this](uint32_t w) { return pushed_steps_[w]; });
}

std::vector<uint32_t> StepBarrier::MissingWorkers() const {
  std::vector<uint32_t> missing;
  const uint64_t slowest = Slowest();
  for (uint32_t w = 0; w < num_workers_; ++w) {
    if (!active_[w]) continue;
    if (mode_ == BSP ? pending_[w] == nullptr : pushed_steps_[w] == slowest) {
      missing.push_back(w);
    }
  }
  return missing;
}

StepBarrier::State StepBarrier::CopyState() const {
  State s;
  s.version = version_;
  s.pushed_steps = pushed_steps_;
  s.pending.resize(pending_.size());
  for (size_t w = 0; w < pending_.size(); ++w) {
    if (pending_[w] != nullptr) {
      s.pending[w] = std::make_unique<TablePushes>(*pending_[w]);
    }
  }
  return s;
}

void StepBarrier::Restore(State state, bool restarted) {
  version_ = state.version;
  if (restarted) {
    restored_version_ = state.version;
    restored_ = true;
  }
  claimed_steps_ = state.pushed_steps;
  pushed_steps_ = std::move(state.pushed_steps);
  pending_ = std::move(state.pending);
  pending_bytes_ = 0;
  for (const auto& p : pending_) {
    if (p != nullptr) pending_bytes_ += p->bytes;
  }
}

std::string StepBarrier::RestoredNote() const {
  if (!restored_) return "";
  return absl::StrFormat(
      " (the shard restarted and restored the tables from their checkpoint "
      "of step %d; the updates after it are lost)",
      restored_version_);
}

}  // namespace sparse_internal
}  // namespace ps
