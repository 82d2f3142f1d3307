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

// The chunk's state as a backup stores it (ASP/SSP: with the (worker,
// step) dedupe state, so a retry of an applied push stays a duplicate on
// the successor). Caller holds c.mu.
ReplicaChunk CopyChunk(const Job& job, const Chunk& c)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  ReplicaChunk out;
  out.set_chunk_id(c.placement.chunk_id());
  out.set_version(c.state.version);
  EncodeFloats(c.state.values, out.mutable_values());
  for (const std::vector<float>& slot : c.state.optimizer.slots) {
    EncodeFloats(slot, out.add_slots());
  }
  out.set_optimizer_steps(c.state.optimizer.steps);
  if (job.mode != BSP) {
    out.mutable_next_steps()->Add(c.state.next_step.begin(),
                                  c.state.next_step.end());
  }
  return out;
}

// The index of `shard` among (p.shard(), p.backups()...), or -1 (also for
// an index past Chunk::acked).
int CopyIndex(const ChunkPlacement& p, uint32_t shard) {
  if (p.shard() == shard) return 0;
  for (int i = 0; i < p.backups_size(); ++i) {
    if (p.backups(i) == shard) {
      return i + 1 < static_cast<int>(kMaxChunkCopies) ? i + 1 : -1;
    }
  }
  return -1;
}

// 1 + the version `shard` acknowledged of `c` (0: none).
uint64_t Acked(const Chunk& c, uint32_t shard) {
  const int i = CopyIndex(c.placement, shard);
  return i < 0 ? 0 : c.acked[i].load();
}

void RaiseTo(std::atomic<uint64_t>& a, uint64_t v) {
  uint64_t seen = a.load();
  while (seen < v && !a.compare_exchange_weak(seen, v)) {
  }
}

// Raises each served chunk's replicated version to the lowest version its
// live backups acknowledged (its own version without any), answers the
// ASP/SSP pushes that releases, sets the job's to the lowest of those and
// answers the (BSP) waits that releases.
void PublishReplicated(Job& job, const ReplicaView& view) {
  std::vector<WaiterPtr> ready;
  for (const std::unique_ptr<Chunk>& c : job.chunks) {
    if (!job.Serves(*c)) continue;
    uint64_t v = c->version.load();
    for (uint32_t b : view.LiveBackups(c->placement)) {
      const uint64_t acked = Acked(*c, b);
      v = std::min(v, acked == 0 ? 0 : acked - 1);
    }
    RaiseTo(c->replicated, v);
    absl::MutexLock l(&c->mu);
    ReleaseReplicaWaiters(*c, &ready);
  }
  CompleteAll(&ready);
}

// Forwards of one backup cut at this many bytes (messages stay under the
// 4 MiB gRPC limit).
constexpr size_t kForwardBytes = size_t{2} << 20;

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

void Replicator::Record(uint32_t backup, bool ok) {
  absl::MutexLock l(&mu_);
  if (ok) {
    failing_since_.erase(backup);
  } else {
    failing_since_.emplace(backup, absl::Now());
  }
}

std::vector<uint32_t> Replicator::Lagging(absl::Duration lag,
                                          absl::Time now) const {
  std::vector<uint32_t> out;
  absl::MutexLock l(&mu_);
  for (const auto& [backup, since] : failing_since_) {
    if (now - since >= lag && !view_->Failed(backup) &&
        !view_->Joining(backup)) {
      out.push_back(backup);
    }
  }
  return out;
}

void Replicator::ForgetFailures(uint32_t shard) {
  absl::MutexLock l(&mu_);
  failing_since_.erase(shard);
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
  // By backup: its requests, each under kForwardBytes.
  std::map<uint32_t, std::vector<ReplicateRequest>> requests;
  struct Sent {
    Chunk* chunk;
    uint64_t version;
    uint32_t to;
    size_t request;  // index in requests[to]
  };
  std::vector<Sent> sent;
  for (const std::unique_ptr<Chunk>& c : job.chunks) {
    if (!job.Serves(*c)) continue;
    // Live backups (waited for) and joining ones (copied in, not waited
    // for) alike: every copy behind this chunk's version gets its state.
    std::vector<uint32_t> to = view_->LiveBackups(c->placement);
    for (uint32_t j : view_->JoiningBackups(c->placement)) to.push_back(j);
    const uint64_t version = c->version.load();
    to.erase(std::remove_if(to.begin(), to.end(),
                            [&](uint32_t b) {
                              return CopyIndex(c->placement, b) < 0 ||
                                     Acked(*c, b) > version;
                            }),
             to.end());
    if (to.empty()) continue;
    ReplicaChunk copy;
    {
      absl::MutexLock l(&c->mu);
      copy = CopyChunk(job, *c);
    }
    for (uint32_t b : to) {
      std::vector<ReplicateRequest>& reqs = requests[b];
      if (reqs.empty() || reqs.back().ByteSizeLong() > kForwardBytes) {
        reqs.emplace_back();
      }
      *reqs.back().add_chunks() = copy;
      sent.push_back({c.get(), copy.version(), b, reqs.size() - 1});
    }
  }
  ReplicaSender sender;
  {
    absl::MutexLock l(&mu_);
    sender = sender_;
  }
  std::map<std::pair<uint32_t, size_t>, bool> acked;
  for (auto& [backup, reqs] : requests) {
    for (size_t i = 0; i < reqs.size(); ++i) {
      ReplicateRequest& req = reqs[i];
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
      acked[{backup, i}] = s.ok();
      Record(backup, s.ok());
      if (!s.ok()) break;  // the rest would fail too; retried as a whole
    }
  }
  bool all = true;
  for (const Sent& s : sent) {
    if (acked[{s.to, s.request}]) {
      RaiseTo(s.chunk->acked[CopyIndex(s.chunk->placement, s.to)],
              s.version + 1);
      job.counters.replica_forwards.fetch_add(1);
      continue;
    }
    // Failed by the coordinator since the copy: no longer forwarded to
    // (counted and logged when the view moved, Shard::SetReplicaView).
    if (view_->Failed(s.to)) continue;
    all = false;
  }
  PublishReplicated(job, *view_);
  return all;
}

std::vector<uint32_t> Behind(const Job& job, const ReplicaView& view) {
  std::vector<uint32_t> behind;
  for (const std::unique_ptr<Chunk>& c : job.chunks) {
    if (!job.Serves(*c)) continue;
    const uint64_t version = c->version.load();
    for (uint32_t j : view.JoiningBackups(c->placement)) {
      if (Acked(*c, j) <= version &&
          std::find(behind.begin(), behind.end(), j) == behind.end()) {
        behind.push_back(j);
      }
    }
  }
  return behind;
}

void ForgetAcks(Job& job, uint32_t shard) {
  for (const std::unique_ptr<Chunk>& c : job.chunks) {
    const int i = CopyIndex(c->placement, shard);
    if (i >= 0) c->acked[i].store(0);
  }
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
    // ASP/SSP: one dedupe entry per worker rank (BSP: none).
    sizes = sizes && static_cast<size_t>(r.next_steps_size()) ==
                         (job.mode == BSP ? 0 : c->state.next_step.size());
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
    c.copied.store(true);
    if (r.version() <= c.state.version && r.version() > 0) continue;
    DecodeFloats(r.values(), absl::MakeSpan(c.state.values));
    for (int s = 0; s < r.slots_size(); ++s) {
      DecodeFloats(r.slots(s), absl::MakeSpan(c.state.optimizer.slots[s]));
    }
    c.state.optimizer.steps = r.optimizer_steps();
    if (job.mode != BSP) {
      std::copy(r.next_steps().begin(), r.next_steps().end(),
                c.state.next_step.begin());
    }
    c.state.version = r.version();
    c.version.store(r.version(), std::memory_order_release);
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace ps
