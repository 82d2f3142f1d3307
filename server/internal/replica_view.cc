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
  if (req.epoch() == epoch_) return false;
  epoch_ = req.epoch();
  failed_.assign(req.failed().begin(), req.failed().end());
  return true;
}

uint64_t ReplicaView::epoch() const {
  absl::MutexLock l(&mu_);
  return epoch_;
}

bool ReplicaView::FailedLocked(uint32_t shard) const {
  return std::find(failed_.begin(), failed_.end(), shard) != failed_.end();
}

bool ReplicaView::Failed(uint32_t shard) const {
  absl::MutexLock l(&mu_);
  return FailedLocked(shard);
}

uint32_t ReplicaView::ActingPrimary(const ChunkPlacement& p) const {
  absl::MutexLock l(&mu_);
  if (!FailedLocked(p.shard())) return p.shard();
  for (uint32_t b : p.backups()) {
    if (!FailedLocked(b)) return b;
  }
  return kNoShard;
}

std::vector<uint32_t> ReplicaView::LiveBackups(const ChunkPlacement& p) const {
  absl::MutexLock l(&mu_);
  std::vector<uint32_t> out;
  if (p.shard() != self_ && !FailedLocked(p.shard())) out.push_back(p.shard());
  for (uint32_t b : p.backups()) {
    if (b != self_ && !FailedLocked(b)) out.push_back(b);
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
