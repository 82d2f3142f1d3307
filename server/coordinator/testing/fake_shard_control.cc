#include "server/coordinator/testing/fake_shard_control.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ps {

absl::Status FakeShardControl::RegisterJob(uint32_t shard,
                                           const RegisterJobRequest& request) {
  bool block;
  {
    absl::MutexLock lock(&mu_);
    calls_.push_back(absl::StrCat(
        "register ", shard, " ", request.job_id(), " workers=",
        request.num_workers(), " chunks=", request.placement().chunks_size()));
    block = block_register_;
  }
  if (block) {
    // Calls are serialized, so only this thread touches entered_ here.
    if (!entered_.HasBeenNotified()) entered_.Notify();
    release_.WaitForNotification();
  }
  absl::MutexLock lock(&mu_);
  if (fail_shard_ == static_cast<int>(shard)) {
    return absl::ResourceExhaustedError("memory budget exceeded");
  }
  return absl::OkStatus();
}

absl::Status FakeShardControl::DropJob(uint32_t shard,
                                       const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  calls_.push_back(absl::StrCat("drop ", shard, " ", job_id));
  return absl::OkStatus();
}

absl::Status FakeShardControl::SetMembership(
    uint32_t shard, const SetMembershipRequest& request) {
  absl::MutexLock lock(&mu_);
  calls_.push_back(
      absl::StrCat("membership ", shard, " ", request.job_id(), " [",
                   absl::StrJoin(request.active_workers(), ","), "]"));
  return fail_membership_ ? absl::UnavailableError("shard down")
                          : absl::OkStatus();
}

std::vector<std::string> FakeShardControl::TakeCalls() {
  absl::MutexLock lock(&mu_);
  return std::exchange(calls_, {});
}

void FakeShardControl::FailRegisterOn(int shard) {
  absl::MutexLock lock(&mu_);
  fail_shard_ = shard;
}

void FakeShardControl::FailMembership() {
  absl::MutexLock lock(&mu_);
  fail_membership_ = true;
}

void FakeShardControl::BlockRegister() {
  absl::MutexLock lock(&mu_);
  block_register_ = true;
}

}  // namespace ps
