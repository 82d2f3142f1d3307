#include "server/internal/replica_view.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ps {
namespace internal {

absl::StatusOr<bool> ReplicaView::Set(const SetReplicaViewRequest& req) {
  absl::MutexLock l(&mu_);
  if (req.epoch() < epoch_) {
    return absl::FailedPreconditionError(
        absl::StrCat("epoch: ", req.epoch(), " is older than this shard's ",
                     epoch_, " (a stale coordinator?)"));
  }
  addresses_.assign(req.addresses().begin(), req.addresses().end());
  heard_ = true;
  told_incarnation_ = req.incarnation();
  if (req.epoch() == epoch_) return false;
  epoch_ = req.epoch();
  failed_.assign(req.failed().begin(), req.failed().end());
  joining_.assign(req.joining().begin(), req.joining().end());
  rejoined_.assign(req.rejoined().begin(), req.rejoined().end());
  return true;
}

uint64_t ReplicaView::epoch() const {
  absl::MutexLock l(&mu_);
  return epoch_;
}

bool ReplicaView::heard() const {
  absl::MutexLock l(&mu_);
  return heard_;
}

uint64_t ReplicaView::told_incarnation() const {
  absl::MutexLock l(&mu_);
  return told_incarnation_;
}

bool ReplicaView::FailedLocked(uint32_t shard) const {
  return std::find(failed_.begin(), failed_.end(), shard) != failed_.end();
}

namespace {

bool Contains(const std::vector<uint32_t>& v, uint32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// (primary, backups...).
std::vector<uint32_t> Copies(const ChunkPlacement& p) {
  std::vector<uint32_t> out = {p.shard()};
  out.insert(out.end(), p.backups().begin(), p.backups().end());
  return out;
}

}  // namespace

bool ReplicaView::JoiningLocked(uint32_t shard) const {
  return Contains(joining_, shard);
}

bool ReplicaView::RejoinedLocked(uint32_t shard) const {
  return Contains(rejoined_, shard);
}

bool ReplicaView::Joining(uint32_t shard) const {
  absl::MutexLock l(&mu_);
  return JoiningLocked(shard);
}

std::vector<uint32_t> ReplicaView::joining() const {
  absl::MutexLock l(&mu_);
  return joining_;
}

bool ReplicaView::Failed(uint32_t shard) const {
  absl::MutexLock l(&mu_);
  return FailedLocked(shard);
}

uint32_t ReplicaView::ActingPrimary(const ChunkPlacement& p) const {
  absl::MutexLock l(&mu_);
  const std::vector<uint32_t> copies = Copies(p);
  for (uint32_t s : copies) {
    if (!FailedLocked(s) && !JoiningLocked(s) && !RejoinedLocked(s)) return s;
  }
  // Only copies that came back are left: the first of them takes over.
  for (uint32_t s : copies) {
    if (RejoinedLocked(s) && !FailedLocked(s)) return s;
  }
  return kNoShard;
}

std::vector<uint32_t> ReplicaView::LiveBackups(const ChunkPlacement& p) const {
  absl::MutexLock l(&mu_);
  std::vector<uint32_t> out;
  for (uint32_t s : Copies(p)) {
    if (s != self_ && !FailedLocked(s) && !JoiningLocked(s)) out.push_back(s);
  }
  return out;
}

std::vector<uint32_t> ReplicaView::JoiningBackups(
    const ChunkPlacement& p) const {
  absl::MutexLock l(&mu_);
  std::vector<uint32_t> out;
  for (uint32_t s : Copies(p)) {
    if (s != self_ && JoiningLocked(s) && !FailedLocked(s)) out.push_back(s);
  }
  return out;
}

std::string ReplicaView::Address(uint32_t shard) const {
  absl::MutexLock l(&mu_);
  return shard < addresses_.size() ? addresses_[shard] : std::string();
}

uint64_t ReplicaView::WaitForChange(uint64_t epoch, absl::Time deadline) const {
  absl::MutexLock l(&mu_);
  auto moved = [this, epoch]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return epoch_ > epoch;
  };
  mu_.AwaitWithDeadline(absl::Condition(&moved), deadline);
  return epoch_;
}

}  // namespace internal
}  // namespace ps
