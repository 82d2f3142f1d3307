#include "server/internal/reshard_replicas.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/chunk_state.h"
#include "server/internal/replica_apply.h"

namespace ps {
namespace internal {

bool HoldsCopyOf(const ChunkPlacement& p, uint32_t shard) {
  return p.shard() == shard || std::find(p.backups().begin(), p.backups().end(),
                                         shard) != p.backups().end();
}

bool SameCopies(const ChunkPlacement& a, const ChunkPlacement& b) {
  return a.shard() == b.shard() &&
         std::equal(a.backups().begin(), a.backups().end(), b.backups().begin(),
                    b.backups().end());
}

absl::Status CheckCopiesInService(const Job& job, const Placement& placement) {
  if (!job.replicated || job.view == nullptr) return absl::OkStatus();
  for (const ChunkPlacement& p : placement.chunks()) {
    for (int j = -1; j < p.backups_size(); ++j) {
      const uint32_t s = j < 0 ? p.shard() : p.backups(j);
      const bool failed = job.view->Failed(s);
      if (!failed && !job.view->Joining(s)) continue;
      return absl::FailedPreconditionError(absl::StrCat(
          "shard ", s, " holds a copy of ", ChunkName(p), " of job ", job.id,
          " and is ", failed ? "failed over" : "joining", " (replica epoch ",
          job.view->epoch(),
          "); a replicated job moves only with every copy in service: wait "
          "for it to rejoin"));
    }
  }
  return absl::OkStatus();
}

uint32_t CopySource(const Job& job, const ChunkPlacement& p) {
  if (!job.replicated || job.view == nullptr) return p.shard();
  return job.view->ActingPrimary(p);
}

std::shared_ptr<Chunk> CopyLocally(const Job& old, Chunk& held, Job& next,
                                   const ChunkPlacement& p,
                                   const std::vector<uint8_t>& active) {
  auto c = std::make_shared<Chunk>(
      NewChunkState(p, *next.optimizer, next.num_workers), active);
  ReplicaChunk state;
  {
    absl::MutexLock l(&held.mu);
    CopyChunk(old, held, /*acked=*/0, &state);
  }
  absl::MutexLock l(&c->mu);
  StoreReplicaChunk(next, *c, state);
  return c;
}

void MarkCopiesInSync(Chunk& c) {
  const uint64_t v = c.version.load(std::memory_order_acquire);
  for (size_t i = 0; i < kMaxChunkCopies; ++i) {
    c.acked[i].store(v + 1);
    c.forwarding[i].store(v + 1);
  }
  c.replicated.store(v);
  c.copied.store(true);
}

}  // namespace internal
}  // namespace ps
