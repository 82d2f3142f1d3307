#include "server/internal/replica_apply.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "core/float_bytes.h"
#include "server/internal/reasons.h"

namespace ps {
namespace internal {
namespace {

absl::Status Refused(Job& job, absl::Status status) {
  job.rejected.Add(kBadReplica);
  return status;
}

// A forward of another epoch than this shard's view: an older one is
// refused, ABORTED if this view failed the sender (it is fenced: the
// sender stops serving, kReplicaFencedCode), else FAILED_PRECONDITION (the
// coordinator's view change reached this shard first, and the sender
// forwards again once it hears it); a newer one is retried.
}  // namespace

absl::Status CheckForwardEpoch(Job& job, const ReplicateRequest& req) {
  const ReplicaView& view = *job.view;
  const uint64_t epoch = view.epoch();
  if (req.epoch() < epoch) {
    const std::string head = absl::StrCat("epoch: ", req.epoch(), " < ", epoch,
                                          ": shard ", req.from_shard());
    if (view.Failed(req.from_shard())) {
      return Refused(
          job, absl::Status(kReplicaFencedCode, absl::StrCat(head,
                                                             " was failed over "
                                                             "(fenced)")));
    }
    return Refused(job, absl::FailedPreconditionError(absl::StrCat(
                            head, " has not heard epoch ", epoch,
                            " yet; it forwards again at the new epoch")));
  }
  if (req.epoch() > epoch) {
    return absl::UnavailableError(absl::StrCat(
        "epoch: ", req.epoch(), " > ", epoch, " this shard knows; retry"));
  }
  return absl::OkStatus();
}

// A forward of another placement than this job's (a live re-placement,
// reshard.h): a newer one comes from a shard that committed it first, and
// is retried until this one has; an older one from the job it replaced,
// whose copies are not these.
absl::Status CheckPlacementEpoch(Job& job, const ReplicateRequest& req) {
  const uint64_t mine = job.placement.epoch();
  if (req.placement_epoch() > mine) {
    return absl::UnavailableError(
        absl::StrCat("placement_epoch: ", req.placement_epoch(), " > ", mine,
                     " of job ", job.id, " on shard ", job.view->self(),
                     " (not committed here yet); retry"));
  }
  if (req.placement_epoch() < mine) {
    return Refused(job,
                   absl::FailedPreconditionError(absl::StrCat(
                       "placement_epoch: ", req.placement_epoch(), " < ", mine,
                       " of job ", job.id, " on shard ", job.view->self(),
                       ": a forward of the job it "
                       "replaced")));
  }
  return absl::OkStatus();
}

int CopyIndex(const ChunkPlacement& p, uint32_t shard) {
  if (p.shard() == shard) return 0;
  for (int i = 0; i < p.backups_size(); ++i) {
    if (p.backups(i) == shard) {
      return i + 1 < static_cast<int>(kMaxChunkCopies) ? i + 1 : -1;
    }
  }
  return -1;
}

uint64_t Acked(const Chunk& c, uint32_t shard) {
  const int i = CopyIndex(c.placement, shard);
  return i < 0 ? 0 : c.acked[i].load();
}

std::vector<uint32_t> Behind(const Job& job, const ReplicaView& view) {
  std::vector<uint32_t> behind;
  for (const std::shared_ptr<Chunk>& c : job.chunks) {
    if (!job.Serves(*c)) continue;
    // Every version answered so far (a synced copy's acknowledgements hold
    // the answers back from then on; the check covers one answered in the
    // instant it synced).
    const uint64_t answered = c->replicated.load();
    for (uint32_t j : view.JoiningBackups(c->placement)) {
      const int i = CopyIndex(c->placement, j);
      if (i < 0) continue;
      if ((!c->synced[i].load() || c->acked[i].load() <= answered) &&
          std::find(behind.begin(), behind.end(), j) == behind.end()) {
        behind.push_back(j);
      }
    }
  }
  return behind;
}

void ForgetAcks(Job& job, uint32_t shard) {
  for (const std::shared_ptr<Chunk>& c : job.chunks) {
    const int i = CopyIndex(c->placement, shard);
    if (i < 0) continue;
    c->acked[i].store(0);
    c->forwarding[i].store(0);
    c->synced[i].store(false);
  }
}

void CopyChunk(const Job& job, const Chunk& c, uint64_t acked,
               ReplicaChunk* out) {
  out->set_chunk_id(c.placement.chunk_id());
  out->set_version(c.state.version);
  out->set_optimizer_steps(c.state.optimizer.steps);
  if (job.mode == BSP && c.state.version > 0 && acked == c.state.version &&
      c.step_gradient_version == c.state.version) {
    EncodeFloats(c.step_gradient, out->mutable_gradient());
    out->set_gradient_scale(c.step_gradient_scale);
    return;
  }
  EncodeFloats(c.state.values, out->mutable_values());
  for (const std::vector<float>& slot : c.state.optimizer.slots) {
    EncodeFloats(slot, out->add_slots());
  }
  if (job.mode != BSP) {
    out->mutable_next_steps()->Add(c.state.next_step.begin(),
                                   c.state.next_step.end());
  }
}

// A forward's chunk against the copy held here (c.mu held): the sizes, and
// for a gradient (ReplicaChunk.gradient) that this copy holds the version
// before (or the version itself already: a retry, taken as a no-op).
absl::Status CheckReplicaChunk(Job& job, const Chunk& c, const ReplicaChunk& r,
                               const std::string& field) {
  const size_t bytes = c.length * sizeof(float);
  const bool gradient = !r.gradient().empty();
  bool sizes = gradient
                   ? r.gradient().size() == bytes && job.mode == BSP &&
                         r.values().empty() && r.slots_size() == 0
                   : r.values().size() == bytes &&
                         r.slots_size() ==
                             static_cast<int>(c.state.optimizer.slots.size());
  for (const std::string& slot : r.slots()) {
    sizes = sizes && slot.size() == bytes;
  }
  // ASP/SSP: one dedupe entry per worker rank (BSP: none).
  sizes = sizes && static_cast<size_t>(r.next_steps_size()) ==
                       (job.mode == BSP ? 0 : c.state.next_step.size());
  if (!sizes) {
    return Refused(job,
                   absl::InvalidArgumentError(absl::StrCat(
                       field, ": sizes do not fit ", ChunkName(c.placement))));
  }
  if (gradient && c.state.version + 1 < r.version()) {
    return Refused(
        job,
        absl::Status(kReplicaBaseCode,
                     absl::StrCat(field, ".gradient: version ", r.version(),
                                  " needs version ", r.version() - 1, " of ",
                                  ChunkName(c.placement), "; this copy holds ",
                                  c.state.version, ": send the state")));
  }
  return absl::OkStatus();
}

// Stores a checked forward's chunk (c.mu held): its state, or its gradient
// applied with the job's optimizer as the primary applied it. An older
// version than the one held changes nothing.
void StoreReplicaChunk(Job& job, Chunk& c, const ReplicaChunk& r) {
  c.copied.store(true);
  // Version 0 is stored over version 0 (a copy without the initial state:
  // a joining one, a warm start's backup), never over a later one (a
  // forward of it overtaken by a newer one).
  if (r.version() < c.state.version ||
      (r.version() == c.state.version && r.version() > 0)) {
    return;
  }
  if (!r.gradient().empty()) {
    std::vector<float> grad(c.length);
    DecodeFloats(r.gradient(), absl::MakeSpan(grad));
    job.optimizer->Apply(absl::MakeSpan(c.state.values), grad.data(),
                         r.gradient_scale(), &c.state.optimizer);
  } else {
    DecodeFloats(r.values(), absl::MakeSpan(c.state.values));
    for (int s = 0; s < r.slots_size(); ++s) {
      DecodeFloats(r.slots(s), absl::MakeSpan(c.state.optimizer.slots[s]));
    }
  }
  c.state.optimizer.steps = r.optimizer_steps();
  if (job.mode != BSP) {
    std::copy(r.next_steps().begin(), r.next_steps().end(),
              c.state.next_step.begin());
  }
  c.state.version = r.version();
  c.version.store(r.version(), std::memory_order_release);
}

absl::Status ApplyReplica(Job& job, const ReplicateRequest& req) {
  if (!job.replicated) {
    return Refused(job, absl::FailedPreconditionError(absl::StrCat(
                            "job \"", job.id, "\" is not replicated")));
  }
  const ReplicaView& view = *job.view;
  const uint64_t epoch = view.epoch();
  PS_RETURN_IF_ERROR(CheckForwardEpoch(job, req));
  PS_RETURN_IF_ERROR(CheckPlacementEpoch(job, req));
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
    PS_RETURN_IF_ERROR(CheckReplicaChunk(job, *c, r, field));
    chunks.push_back(c);
  }
  for (int i = 0; i < req.chunks_size(); ++i) {
    Chunk& c = *chunks[i];
    absl::MutexLock l(&c.mu);
    // Checked above; under BSP no other forward of it moves it meanwhile
    // (one is in flight per chunk), so its base still holds.
    StoreReplicaChunk(job, c, req.chunks(i));
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace ps
