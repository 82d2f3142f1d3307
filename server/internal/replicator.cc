#include "server/internal/replicator.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/float_bytes.h"
#include "server/internal/reasons.h"
#include "server/internal/waits.h"
#include "spdlog/spdlog.h"

namespace ps {
namespace internal {
namespace {

// The chunk's state as a backup stores it. Caller holds c.mu.
ReplicaChunk CopyChunk(const Chunk& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  ReplicaChunk out;
  out.set_chunk_id(c.placement.chunk_id());
  out.set_version(c.state.version);
  EncodeFloats(c.state.values, out.mutable_values());
  for (const std::vector<float>& slot : c.state.optimizer.slots) {
    EncodeFloats(slot, out.add_slots());
  }
  out.set_optimizer_steps(c.state.optimizer.steps);
  return out;
}

// Sets the job's replicated version to the lowest acknowledged version of
// the chunks it serves and answers the waits that releases.
void PublishReplicated(Job& job) {
  uint64_t lowest = UINT64_MAX;
  for (const std::unique_ptr<Chunk>& c : job.chunks) {
    if (job.Serves(*c)) lowest = std::min(lowest, c->replicated.load());
  }
  if (lowest == UINT64_MAX) return;
  std::vector<WaiterPtr> ready;
  {
    absl::MutexLock l(&job.waits.mu);
    job.waits.replicated_version = lowest;
    ReleaseDurableWaiters(job, &ready);
  }
  CompleteAll(&ready);
}

absl::Status Refused(Job& job, absl::Status status) {
  job.rejected.Add(kBadReplica);
  return status;
}

}  // namespace

Replicator::Replicator(Options options, std::shared_ptr<const ReplicaView> view)
    : options_(options), view_(std::move(view)) {}

Replicator::~Replicator() { Stop(); }

void Replicator::SetSender(ReplicaSender sender) {
  absl::MutexLock l(&mu_);
  sender_ = std::move(sender);
}

void Replicator::Notify(const std::shared_ptr<Job>& job) {
  absl::MutexLock l(&mu_);
  if (stop_) return;
  if (std::find(queue_.begin(), queue_.end(), job) == queue_.end()) {
    queue_.push_back(job);
  }
  if (!started_) {
    started_ = true;
    thread_ = std::thread([this] { Loop(); });
  }
}

void Replicator::Stop() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
    queue_.clear();
  }
  if (thread_.joinable()) thread_.join();
}

bool Replicator::stopping() const {
  absl::MutexLock l(&mu_);
  return stop_;
}

void Replicator::Loop() {
  while (true) {
    std::shared_ptr<Job> job;
    {
      absl::MutexLock l(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    CatchUp(*job);
  }
}

void Replicator::CatchUp(Job& job) {
  uint64_t logged_epoch = UINT64_MAX;
  while (!stopping() && !job.waits.is_closed.load()) {
    uint64_t epoch = 0;
    if (ForwardOnce(job, &epoch)) return;
    if (logged_epoch != epoch) {
      logged_epoch = epoch;
      spdlog::warn(
          "shard {}: job {}: a backup did not take a forward (epoch {}); "
          "retrying until it does or the coordinator fails it",
          view_->self(), job.id, epoch);
    }
    view_->WaitForChange(epoch, absl::Now() + options_.retry);
  }
}

bool Replicator::ForwardOnce(Job& job, uint64_t* epoch) {
  *epoch = view_->epoch();
  std::map<uint32_t, ReplicateRequest> requests;  // by backup shard
  struct Sent {
    Chunk* chunk;
    uint64_t version;
    std::vector<uint32_t> to;
  };
  std::vector<Sent> sent;
  for (const std::unique_ptr<Chunk>& c : job.chunks) {
    if (!job.Serves(*c)) continue;
    if (c->version.load() <= c->replicated.load()) continue;
    std::vector<uint32_t> to = view_->LiveBackups(c->placement);
    ReplicaChunk copy;
    {
      absl::MutexLock l(&c->mu);
      if (to.empty()) {
        c->replicated.store(c->state.version);
        continue;
      }
      copy = CopyChunk(*c);
    }
    for (uint32_t b : to) {
      ReplicateRequest& req = requests[b];
      *req.add_chunks() = copy;
    }
    sent.push_back({c.get(), copy.version(), std::move(to)});
  }
  ReplicaSender sender;
  {
    absl::MutexLock l(&mu_);
    sender = sender_;
  }
  std::map<uint32_t, bool> acked;
  for (auto& [backup, req] : requests) {
    req.set_job_id(job.id);
    req.set_epoch(*epoch);
    req.set_from_shard(view_->self());
    absl::Status s = sender == nullptr
                         ? absl::UnavailableError("no replica sender")
                         : sender(view_->Address(backup), req,
                                  absl::Now() + options_.deadline);
    if (!s.ok()) {
      spdlog::debug("shard {}: forward of job {} to shard {}: {}",
                    view_->self(), job.id, backup, s.ToString());
    }
    acked[backup] = s.ok();
  }
  bool all = true;
  for (const Sent& s : sent) {
    bool ok = true;
    for (uint32_t b : s.to) {
      if (acked[b]) continue;
      // Failed by the coordinator since the copy: no longer waited for
      // (counted and logged when the view moved, Shard::SetReplicaView).
      if (view_->Failed(b)) continue;
      ok = false;
    }
    if (ok) {
      uint64_t seen = s.chunk->replicated.load();
      while (seen < s.version &&
             !s.chunk->replicated.compare_exchange_weak(seen, s.version)) {
      }
      job.counters.replica_forwards.fetch_add(s.to.size());
    }
    all = all && ok;
  }
  PublishReplicated(job);
  return all;
}

absl::Status ApplyReplica(Job& job, const ReplicateRequest& req) {
  if (!job.replicated) {
    return Refused(job, absl::FailedPreconditionError(absl::StrCat(
                            "job \"", job.id, "\" is not replicated")));
  }
  const ReplicaView& view = *job.view;
  const uint64_t epoch = view.epoch();
  if (req.epoch() < epoch) {
    return Refused(job, absl::FailedPreconditionError(absl::StrCat(
                            "epoch: ", req.epoch(), " < ", epoch, ": shard ",
                            req.from_shard(), " was failed over (fenced)")));
  }
  if (req.epoch() > epoch) {
    return absl::UnavailableError(absl::StrCat(
        "epoch: ", req.epoch(), " > ", epoch, " this shard knows; retry"));
  }
  std::vector<Chunk*> chunks;
  for (int i = 0; i < req.chunks_size(); ++i) {
    const ReplicaChunk& r = req.chunks(i);
    const std::string field = absl::StrCat("chunks[", i, "]");
    Chunk* c = r.chunk_id() < job.local.size() ? job.LocalChunk(r.chunk_id())
                                               : nullptr;
    if (c == nullptr) {
      return Refused(job, absl::InvalidArgumentError(absl::StrCat(
                              field, ".chunk_id: ", r.chunk_id(),
                              " has no copy on shard ", view.self())));
    }
    if (view.ActingPrimary(c->placement) != req.from_shard() ||
        req.from_shard() == view.self()) {
      return Refused(job, absl::FailedPreconditionError(absl::StrCat(
                              field, ": shard ", req.from_shard(),
                              " is not the acting primary of ",
                              ChunkName(c->placement), " at epoch ", epoch)));
    }
    absl::MutexLock l(&c->mu);
    const size_t bytes = c->length * sizeof(float);
    bool sizes =
        r.values().size() == bytes &&
        r.slots_size() == static_cast<int>(c->state.optimizer.slots.size());
    for (const std::string& slot : r.slots()) {
      sizes = sizes && slot.size() == bytes;
    }
    if (!sizes) {
      return Refused(
          job, absl::InvalidArgumentError(absl::StrCat(
                   field, ": sizes do not fit ", ChunkName(c->placement))));
    }
    chunks.push_back(c);
  }
  for (int i = 0; i < req.chunks_size(); ++i) {
    const ReplicaChunk& r = req.chunks(i);
    Chunk& c = *chunks[i];
    absl::MutexLock l(&c.mu);
    if (r.version() <= c.state.version && r.version() > 0) continue;
    DecodeFloats(r.values(), absl::MakeSpan(c.state.values));
    for (int s = 0; s < r.slots_size(); ++s) {
      DecodeFloats(r.slots(s), absl::MakeSpan(c.state.optimizer.slots[s]));
    }
    c.state.optimizer.steps = r.optimizer_steps();
    c.state.version = r.version();
    c.version.store(r.version(), std::memory_order_release);
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace ps
