#include "server/coordinator/shard_op_queue.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace ps {

ShardOpQueue::ShardOpQueue(ShardControl* shards, uint32_t num_shards)
    : shards_(shards), num_shards_(num_shards) {}

void ShardOpQueue::Enqueue(std::function<void()> op) {
  absl::MutexLock lock(&mu_);
  ops_.push_back(std::move(op));
  ++queued_;
}

void ShardOpQueue::DrainAll() {
  uint64_t ticket;
  {
    absl::MutexLock lock(&mu_);
    ticket = queued_;
  }
  Drain();
  absl::MutexLock lock(&mu_);
  struct Ran {
    const uint64_t* finished;
    uint64_t ticket;
    bool operator()() const { return *finished >= ticket; }
  } ran{&finished_, ticket};
  mu_.Await(absl::Condition(&ran));
}

void ShardOpQueue::Drain() {
  {
    absl::MutexLock lock(&mu_);
    if (draining_) return;  // that thread will run what we queued
    draining_ = true;
  }
  for (;;) {
    std::function<void()> op;
    {
      absl::MutexLock lock(&mu_);
      if (ops_.empty()) {
        draining_ = false;
        return;
      }
      op = std::move(ops_.front());
      ops_.pop_front();
    }
    op();
    absl::MutexLock lock(&mu_);
    ++finished_;
  }
}

absl::Status ShardOpQueue::OnEachShard(
    const char* what, const std::function<absl::Status(uint32_t)>& call,
    uint32_t* asked) const {
  *asked = 0;
  for (uint32_t s = 0; s < num_shards_; ++s) {
    ++*asked;
    absl::Status status = call(s);
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat("shard ", s, " ", what,
                                                      ": ", status.message()));
    }
  }
  return absl::OkStatus();
}

void ShardOpQueue::EnqueueRegister(
    std::function<std::optional<RegisterJobRequest>()> prepare,
    RegisterDone done) {
  Enqueue([this, prepare = std::move(prepare), done = std::move(done)] {
    const std::optional<RegisterJobRequest> request = prepare();
    if (!request.has_value()) return;
    uint32_t asked = 0;
    absl::Status failure = OnEachShard(
        "RegisterJob",
        [&](uint32_t s) { return shards_->RegisterJob(s, *request); }, &asked);
    done(std::move(failure), asked);
  });
}

void ShardOpQueue::EnqueueDrop(const std::string& job_id, uint32_t num_shards) {
  Enqueue([this, job_id, num_shards] {
    for (uint32_t s = 0; s < num_shards; ++s) {
      absl::Status status = shards_->DropJob(s, job_id);
      if (!status.ok()) {
        spdlog::warn("job {}: DropJob on shard {}: {}", job_id, s,
                     status.ToString());
      }
    }
  });
}

void ShardOpQueue::EnqueueMembership(
    SetMembershipRequest request,
    std::function<void(absl::Status)> on_failure) {
  Enqueue([this, request = std::move(request),
           on_failure = std::move(on_failure)] {
    uint32_t asked = 0;
    absl::Status failure = OnEachShard(
        "SetMembership",
        [&](uint32_t s) { return shards_->SetMembership(s, request); }, &asked);
    if (!failure.ok()) on_failure(std::move(failure));
  });
}

}  // namespace ps
