#include "server/internal/job.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ps {
namespace internal {

uint64_t Job::SlowestWorkerSteps() const {
  uint64_t slowest = UINT64_MAX;
  for (uint32_t r = 0; r < num_workers; ++r) {
    if (!is_active[r].load(std::memory_order_relaxed)) continue;
    slowest = std::min(slowest, counters.workers[r].Steps());
  }
  return slowest == UINT64_MAX ? 0 : slowest;
}

uint64_t Job::MinActiveClock() const {
  uint64_t m = UINT64_MAX;
  for (uint32_t r = 0; r < num_workers; ++r) {
    if (waits.active[r]) m = std::min(m, waits.clock[r]);
  }
  return m == UINT64_MAX ? 0 : m;
}

uint64_t Job::LowestVersion() const {
  uint64_t version = UINT64_MAX;
  for (const std::unique_ptr<Chunk>& c : chunks) {
    version = std::min(version, c->version.load(std::memory_order_acquire));
  }
  return version == UINT64_MAX ? 0 : version;
}

const char* RequestMethodName(RequestMethod m) {
  static constexpr const char* kNames[kNumRequestMethods] = {
      "PushPull", "Pull", "Push", "SparseExchange"};
  return m < kNumRequestMethods ? kNames[m] : "unknown";
}

std::string ChunkName(const ChunkPlacement& p) {
  return absl::StrCat("chunk ", p.chunk_id(), " of tensor ", p.tensor());
}

}  // namespace internal
}  // namespace ps
