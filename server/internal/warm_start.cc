#include "server/internal/warm_start.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "core/npz_reader.h"

namespace ps {
namespace internal {
namespace {

absl::Status FromFile(Job& job, uint32_t shard_id) {
  const std::string& path = job.spec.init().from_file();
  const std::string field = "spec.init.from_file: ";
  absl::StatusOr<std::vector<NpyArray>> arrays = ReadNpzFile(path);
  if (!arrays.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, "shard ", shard_id, ": ", arrays.status().message()));
  }
  absl::StatusOr<NpzTensors> tensors =
      MatchTensors(*arrays, job.spec.tensors(), path);
  if (!tensors.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, tensors.status().message()));
  }
  for (const std::shared_ptr<Chunk>& c : job.chunks) {
    const absl::Span<const float> t = tensors->at(c->placement.tensor());
    absl::MutexLock l(&c->mu);
    std::copy_n(t.begin() + c->placement.offset(), c->length,
                c->state.values.begin());
  }
  return absl::OkStatus();
}

absl::Status FromJob(Job& job, const Job* source, uint32_t shard_id) {
  const std::string& id = job.spec.init().from_job();
  const std::string field = absl::StrCat("spec.init.from_job: job \"", id,
                                         "\" on shard ", shard_id, ": ");
  if (source == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(field,
                     "not held here (dropped, or this shard restarted without "
                     "its checkpoint); export it and use init.from_file"));
  }
  const bool with_state = job.spec.init().optimizer_state();
  if (with_state &&
      source->spec.optimizer().kind() != job.spec.optimizer().kind()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, "optimizer_state: its optimizer is another kind"));
  }
  for (const std::shared_ptr<Chunk>& c : job.chunks) {
    const ChunkPlacement& p = c->placement;
    if (job.replicated) {
      // Answers wait until the backups hold the initial state (Replicator).
      c->initial_replicated.store(false);
      if (p.shard() != shard_id) {
        // A backup's copy: the source's chunk is on the primary's shard,
        // which forwards its initial state.
        c->initial_held = false;
        continue;
      }
    }
    const int32_t at =
        p.chunk_id() < source->local.size() ? source->local[p.chunk_id()] : -1;
    Chunk* from = at < 0 ? nullptr : source->chunks[at].get();
    if (from == nullptr || from->placement.tensor() != p.tensor() ||
        from->placement.offset() != p.offset() || from->length != c->length) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "tensor \"", p.tensor(), "\" chunk ", p.index(),
                       " is not the same chunk there"));
    }
    std::vector<float> values;
    OptimizerState state;
    {
      absl::MutexLock l(&from->mu);
      values = from->state.values;
      if (with_state) state = from->state.optimizer;
    }
    absl::MutexLock l(&c->mu);
    c->state.values = std::move(values);
    if (with_state) c->state.optimizer = std::move(state);
  }
  return absl::OkStatus();
}

}  // namespace

void MarkJoiningCopies(Job& job) {
  if (!job.ForwardsInitialState()) return;
  for (const std::shared_ptr<Chunk>& c : job.chunks) {
    c->initial_held = false;
    c->initial_replicated.store(false);
  }
}

absl::Status ApplyWarmStart(Job& job, const Job* source, uint32_t shard_id) {
  switch (job.spec.init().source_case()) {
    case WarmStart::kFromFile:
      return FromFile(job, shard_id);
    case WarmStart::kFromJob:
      return FromJob(job, source, shard_id);
    case WarmStart::SOURCE_NOT_SET:
      break;
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace ps
