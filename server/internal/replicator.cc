#include "server/internal/replicator.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/float_bytes.h"
#include "server/internal/replica_apply.h"
#include "server/internal/waits.h"
#include "spdlog/spdlog.h"

namespace ps {
namespace internal {
namespace {

void RaiseTo(std::atomic<uint64_t>& a, uint64_t v) {
  uint64_t seen = a.load();
  while (seen < v && !a.compare_exchange_weak(seen, v)) {
  }
}

// Raises the chunk's replicated version to the lowest version its live
// backups and its synced joining copies acknowledged (its own version
// without any) and moves the waits that releases to `ready`.
void PublishChunk(const Job& job, Chunk& c, const ReplicaView& view,
                  std::vector<WaiterPtr>* ready) {
  if (!job.Serves(c)) return;
  uint64_t v = c.version.load();
  // Warm-started from a job: whether every copy waited for acknowledged
  // a state of ours (the initial one at least), and this one holds it.
  bool initial = c.initial_held || c.copied.load();
  auto lower_to = [&c, &v, &initial](int copy) {
    const uint64_t acked = copy < 0 ? 0 : c.acked[copy].load();
    v = std::min(v, acked == 0 ? 0 : acked - 1);
    initial = initial && acked > 0;
  };
  for (uint32_t b : view.LiveBackups(c.placement)) {
    lower_to(CopyIndex(c.placement, b));
  }
  for (uint32_t j : view.JoiningBackups(c.placement)) {
    const int copy = CopyIndex(c.placement, j);
    if (copy >= 0 && c.synced[copy].load()) lower_to(copy);
  }
  if (job.ForwardsInitialState()) c.initial_replicated.store(initial);
  RaiseTo(c.replicated, v);
  absl::MutexLock l(&c.mu);
  ReleaseReplicaWaiters(c, ready);
}

// PublishChunk for every chunk the job serves here; answers what that
// releases.
void PublishReplicated(Job& job, const ReplicaView& view) {
  std::vector<WaiterPtr> ready;
  for (const std::shared_ptr<Chunk>& c : job.chunks) {
    PublishChunk(job, *c, view, &ready);
  }
  CompleteAll(&ready);
}

// A forward of `version` to copy `i` of `c` failed: unless a newer copy
// was queued since, the next dispatch sends the chunk again.
void Unforward(Chunk& c, int i, uint64_t version) {
  if (i < 0) return;
  uint64_t expected = version + 1;
  c.forwarding[i].compare_exchange_strong(expected, 0);
}

// A request to one backup is cut at this many bytes of values (messages
// stay under the 4 MiB gRPC limit with an optimizer slot, and each
// acknowledgement releases its chunks' answers soon); a single chunk
// larger than it goes alone.
constexpr size_t kForwardBytes = size_t{1} << 20;

}  // namespace

Replicator::Replicator(Options options, std::shared_ptr<const ReplicaView> view)
    : options_(options),
      view_(std::move(view)),
      health_({.deadline = options.deadline,
               .max_deadline = options.max_deadline}) {}

Replicator::~Replicator() { Stop(); }

void Replicator::SetSender(ReplicaSender sender) {
  absl::MutexLock l(&mu_);
  sender_ = std::move(sender);
}

ReplicaSender Replicator::sender() const {
  absl::MutexLock l(&mu_);
  return sender_;
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
  std::vector<std::thread> threads;
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
    queue_.clear();
    for (auto& [backup, stream] : streams_) {
      stream->queue.clear();
      for (std::thread& t : stream->senders) threads.push_back(std::move(t));
      stream->senders.clear();
    }
    if (thread_.joinable()) threads.push_back(std::move(thread_));
  }
  for (std::thread& t : threads) t.join();
}

absl::Duration Replicator::DeadlineFor(uint32_t backup) const {
  absl::MutexLock l(&mu_);
  return health_.DeadlineFor(backup);
}

void Replicator::Record(uint32_t backup, const absl::Status& s,
                        absl::Duration deadline) {
  const absl::Time now = absl::Now();
  absl::MutexLock l(&mu_);
  if (s.ok()) {
    health_.Answered(backup);
  } else {
    health_.Failed(backup, s, deadline, now);
  }
}

std::vector<uint32_t> Replicator::Lagging(absl::Duration lag,
                                          absl::Time now) const {
  absl::MutexLock l(&mu_);
  return health_.Lagging(lag, now, *view_);
}

void Replicator::ForgetFailures(uint32_t shard) {
  absl::MutexLock l(&mu_);
  health_.Forget(shard, view_->self());
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
    Dispatch(job);
  }
}

void Replicator::Advanced(const std::shared_ptr<Job>& job,
                          absl::Span<Chunk* const> chunks) {
  if (job->waits.is_closed.load()) return;
  const uint64_t epoch = view_->epoch();
  std::vector<WaiterPtr> ready;
  for (Chunk* c : chunks) {
    if (!job->Serves(*c)) continue;
    Queue(job, *c, epoch);
    PublishChunk(*job, *c, *view_, &ready);  // no live backup: answered now
  }
  CompleteAll(&ready);
}

void Replicator::Dispatch(const std::shared_ptr<Job>& job) {
  if (job->waits.is_closed.load()) return;
  const uint64_t epoch = view_->epoch();
  for (const std::shared_ptr<Chunk>& c : job->chunks) {
    if (job->Serves(*c)) Queue(job, *c, epoch);
  }
  // Chunks without a live backup left (failed since) answer at their own
  // version.
  PublishReplicated(*job, *view_);
}

void Replicator::Queue(const std::shared_ptr<Job>& job, Chunk& c,
                       uint64_t epoch) {
  // Live backups (waited for) and joining ones (copied in, waited for once
  // synced) alike: every copy behind this chunk's version gets its state,
  // unless that version is already on its way.
  std::vector<uint32_t> to = view_->LiveBackups(c.placement);
  for (uint32_t j : view_->JoiningBackups(c.placement)) to.push_back(j);
  const uint64_t version = c.version.load();
  for (uint32_t b : to) {
    const int i = CopyIndex(c.placement, b);
    if (i < 0 || Acked(c, b) > version || c.forwarding[i].load() > version) {
      continue;
    }
    RaiseTo(c.forwarding[i], version + 1);
    Enqueue(b, Forward{job, &c, epoch});
  }
}

void Replicator::Enqueue(uint32_t backup, Forward f) {
  absl::MutexLock l(&mu_);
  if (stop_) return;
  std::unique_ptr<Stream>& stream = streams_[backup];
  if (stream == nullptr) {
    stream = std::make_unique<Stream>();
    stream->backup = backup;
    for (int i = 0; i < std::max(1, options_.streams_per_backup); ++i) {
      stream->senders.emplace_back([this, s = stream.get()] { Send(s); });
    }
  }
  if (Forward* queued = Queued(*stream, f)) {
    queued->epoch = f.epoch;  // queued already: its copy is taken at send
    return;
  }
  stream->queue.push_back(std::move(f));
}

Replicator::Forward* Replicator::Queued(Stream& stream, const Forward& f) {
  for (Forward& queued : stream.queue) {
    if (queued.chunk == f.chunk && queued.job == f.job) return &queued;
  }
  return nullptr;
}

std::vector<Replicator::Forward> Replicator::TakeBatch(Stream* stream) {
  absl::MutexLock l(&mu_);
  auto ready = [this, stream]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || !stream->queue.empty();
  };
  mu_.Await(absl::Condition(&ready));
  std::vector<Forward> batch;
  if (stop_) return batch;
  size_t bytes = 0;
  while (!stream->queue.empty()) {
    Forward& f = stream->queue.front();
    const size_t size = f.chunk->length * sizeof(float);
    if (!batch.empty() &&
        (f.job != batch.front().job || f.epoch != batch.front().epoch ||
         bytes + size > kForwardBytes)) {
      break;
    }
    bytes += size;
    batch.push_back(std::move(f));
    stream->queue.pop_front();
  }
  return batch;
}

ReplicateRequest Replicator::CopyBatch(Job& job, std::vector<Forward>& batch,
                                       uint32_t backup) {
  // The copies are taken now: the newest state (or the step's gradient),
  // held only while in flight.
  ReplicateRequest req;
  req.set_job_id(job.id);
  req.set_epoch(batch.front().epoch);
  req.set_from_shard(view_->self());
  req.set_placement_epoch(job.placement.epoch());
  for (Forward& f : batch) {
    Chunk& c = *f.chunk;
    const int copy = CopyIndex(c.placement, backup);
    {
      absl::MutexLock l(&c.mu);
      CopyChunk(job, c, copy >= 0 ? c.acked[copy].load() : 0, req.add_chunks());
    }
    if (copy >= 0)
      RaiseTo(c.forwarding[copy], req.chunks().rbegin()->version() + 1);
  }
  return req;
}

void Replicator::Unforwarded(std::vector<Forward>& batch,
                             const ReplicateRequest& req, uint32_t backup) {
  for (int i = 0; i < req.chunks_size(); ++i) {
    Chunk& c = *batch[i].chunk;
    Unforward(c, CopyIndex(c.placement, backup), req.chunks(i).version());
  }
}

void Replicator::Acknowledged(Job& job, std::vector<Forward>& batch,
                              const ReplicateRequest& req, uint32_t backup) {
  std::vector<WaiterPtr> ready;
  const bool joining = view_->Joining(backup);
  for (int i = 0; i < req.chunks_size(); ++i) {
    Chunk& c = *batch[i].chunk;
    const int copy = CopyIndex(c.placement, backup);
    if (copy >= 0) {
      RaiseTo(c.acked[copy], req.chunks(i).version() + 1);
      // A joining copy that holds the chunk's version of the moment is
      // waited for from now on (Chunk::synced).
      if (joining && c.acked[copy].load() > c.version.load()) {
        c.synced[copy].store(true);
      }
    }
    job.counters.replica_forwards.fetch_add(1);
    PublishChunk(job, c, *view_, &ready);
  }
  CompleteAll(&ready);
}

void Replicator::Send(Stream* stream) {
  const uint32_t backup = stream->backup;
  while (true) {
    std::vector<Forward> batch = TakeBatch(stream);
    if (batch.empty()) return;  // stopping
    Job& job = *batch.front().job;
    ReplicateRequest req = CopyBatch(job, batch, backup);
    // A closed job, or a backup failed since the dispatch (DropFailedBackups
    // took it out of the acknowledgement set): nothing to send.
    if (job.waits.is_closed.load() || view_->Failed(backup)) {
      Unforwarded(batch, req, backup);
      continue;
    }
    ReplicaSender sender;
    {
      absl::MutexLock l(&mu_);
      sender = sender_;
    }
    const absl::Duration deadline = DeadlineFor(backup);
    const absl::Status s =
        sender == nullptr
            ? absl::UnavailableError("no replica sender")
            : sender(view_->Address(backup), req, absl::Now() + deadline);
    if (s.code() == kReplicaBaseCode) {
      // The backup lacks a gradient's base version (it should not: it
      // acknowledged it): what it acknowledged of these chunks no longer
      // counts, so they go again as state.
      for (Forward& f : batch) {
        Chunk& c = *f.chunk;
        const int copy = CopyIndex(c.placement, backup);
        if (copy >= 0) c.acked[copy].store(0);
      }
      Retry(stream, batch, req, s);
      continue;
    }
    if (s.code() == kReplicaFencedCode) {
      Fenced(job, backup, s);
      Unforwarded(batch, req, backup);
      continue;
    }
    Record(backup, s, deadline);
    if (!s.ok()) {
      Retry(stream, batch, req, s);
      continue;
    }
    Acknowledged(job, batch, req, backup);
  }
}

void Replicator::Fenced(Job& job, uint32_t backup, const absl::Status& s) {
  // The backup's view failed this shard over at a newer epoch than this
  // shard heard (the coordinator cannot reach it, but the workers and the
  // backups can): nothing it holds can be acknowledged any more, and its
  // workers must find the successor now, not when the coordinator gets
  // through or their steps time out.
  if (job.waits.is_closed.load()) return;
  spdlog::warn(
      "shard {}: job {}: shard {} refused a forward: {}; this shard stops "
      "serving the job so that its workers find the successor",
      view_->self(), job.id, backup, std::string(s.message()));
  CloseJob(job, absl::UnavailableError(absl::StrCat(
                    "shard ", view_->self(), " was failed over (fenced: shard ",
                    backup, " refused its forward: ", s.message(),
                    "); its chunks are served by a backup")));
}

void Replicator::Retry(Stream* stream, std::vector<Forward>& batch,
                       ReplicateRequest& req, const absl::Status& s) {
  const uint32_t backup = stream->backup;
  const uint64_t epoch = req.epoch();
  bool log = false;
  {
    absl::MutexLock l(&mu_);
    log = stream->logged_epoch != epoch;
    stream->logged_epoch = epoch;
  }
  if (log) {
    spdlog::warn(
        "shard {}: job {}: shard {} did not take a forward (epoch {}): {}; "
        "retrying until it does or the coordinator fails it",
        view_->self(), req.job_id(), backup, epoch, s.ToString());
  }
  // Failed by the coordinator meanwhile: dropped from the acknowledgement
  // set when the view moved (counted and logged by Shard::SetReplicaView).
  if (!view_->Failed(backup)) {
    view_->WaitForChange(epoch, absl::Now() + options_.retry);
  }
  if (view_->epoch() != epoch || view_->Failed(backup)) {
    // Copies taken at the new epoch, for the backups it names.
    for (int i = 0; i < req.chunks_size(); ++i) {
      Chunk& c = *batch[i].chunk;
      Unforward(c, CopyIndex(c.placement, backup), req.chunks(i).version());
    }
    Notify(batch.front().job);
    return;
  }
  // The same chunks again (copied afresh), ahead of the rest: the backup's
  // lag is judged by how long it goes without a success.
  absl::MutexLock l(&mu_);
  if (stop_) return;
  for (auto f = batch.rbegin(); f != batch.rend(); ++f) {
    if (Queued(*stream, *f) == nullptr) stream->queue.push_front(std::move(*f));
  }
}

}  // namespace internal
}  // namespace ps
