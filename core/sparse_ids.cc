#include "core/sparse_ids.h"

namespace ps {

uint64_t MixId64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint32_t ShardForId(uint64_t id, uint32_t num_shards) {
  const unsigned __int128 product =
      static_cast<unsigned __int128>(MixId64(id)) * num_shards;
  return static_cast<uint32_t>(product >> 64);
}

uint32_t RowOwner(uint64_t id, absl::Span<const uint32_t> owners,
                  uint32_t num_shards) {
  if (owners.empty()) return ShardForId(id, num_shards);
  return owners[ShardForId(id, static_cast<uint32_t>(owners.size()))];
}

}  // namespace ps
