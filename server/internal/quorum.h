// The membership rules that dense chunks (consistency.cc, checkpointer.cc,
// job_stats.cc) and sparse tables (server/sparse/) share: when a BSP step
// has its quorum, and the slowest active worker that SSP waits for.
//
//   if (BspQuorumReached(members, arrived, backup_workers)) ApplyStep();
//   const uint64_t slowest = SlowestActive(
//       n, [&](uint32_t r) { return active[r] != 0; },
//       [&](uint32_t r) { return steps[r]; });
//
// Stateless; every function may be called from any thread.
#ifndef SERVER_INTERNAL_QUORUM_H_
#define SERVER_INTERNAL_QUORUM_H_

#include <algorithm>
#include <cstdint>

namespace ps {
namespace internal {

// BSP: the pushes that complete a step among `members` active workers:
// all of them, or all but `backup_workers`, and at least one.
inline uint32_t BspQuorum(uint32_t members, uint32_t backup_workers) {
  return members > backup_workers ? members - backup_workers : 1;
}

// BSP: whether `arrived` pushes of active workers (at most `members`)
// complete the step. Never without a push.
inline bool BspQuorumReached(uint32_t members, uint32_t arrived,
                             uint32_t backup_workers) {
  return arrived != 0 && arrived >= BspQuorum(members, backup_workers);
}

// The lowest `steps(r)` over the ranks r < num_workers for which
// `is_active(r)`; 0 when no rank is active.
template <typename IsActive, typename Steps>
uint64_t SlowestActive(uint32_t num_workers, IsActive is_active, Steps steps) {
  uint64_t slowest = UINT64_MAX;
  for (uint32_t r = 0; r < num_workers; ++r) {
    if (is_active(r)) slowest = std::min<uint64_t>(slowest, steps(r));
  }
  return slowest == UINT64_MAX ? 0 : slowest;
}

}  // namespace internal
}  // namespace ps

#endif  // SERVER_INTERNAL_QUORUM_H_
