// The partition of sparse-table row ids over shards: part of the on-wire
// contract between workers (which route each id) and shards (which own it),
// and of every checkpoint, so it MUST NEVER CHANGE.
//
//   const uint32_t shard = ShardForId(id, job.num_shards());
//
// Definition (exact, unsigned 64-bit arithmetic):
//
//   MixId64(x):  z = x
//                z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
//                z = (z ^ (z >> 27)) * 0x94D049BB133111EB
//                return z ^ (z >> 31)            // splitmix64's finalizer
//   ShardForId(id, n) = (MixId64(id) * n) >> 64   // 128-bit product
//
// The finalizer is a bijection that spreads sequential and clustered ids
// uniformly; the multiply-shift range reduction maps the hash onto [0, n)
// without a division and without the bias of a power-of-two mask. It uses the
// high bits of the hash, so a consumer that needs another independent hash of
// the same id (the shard's stripe and bucket hash) must mix a salted id, not
// reuse these bits.
#ifndef CORE_SPARSE_IDS_H_
#define CORE_SPARSE_IDS_H_

#include <cstdint>

#include "absl/types/span.h"

namespace ps {

// splitmix64's output function (see above): a bijective 64-bit mixer.
uint64_t MixId64(uint64_t x);

// The shard in [0, num_shards) that owns row `id`. num_shards == 0 returns 0
// (callers validate shard counts; this never divides). Pure, thread-safe.
uint32_t ShardForId(uint64_t id, uint32_t num_shards);

// The shard id that owns row `id` when a job's rows live on `owners` (shard
// ids, Placement.table_shards): owners[ShardForId(id, owners.size())]; empty
// `owners`: every one of `num_shards` shards, ShardForId(id, num_shards).
// Pure, thread-safe.
uint32_t RowOwner(uint64_t id, absl::Span<const uint32_t> owners,
                  uint32_t num_shards);

}  // namespace ps

#endif  // CORE_SPARSE_IDS_H_
