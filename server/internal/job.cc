#include "server/internal/job.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/internal/quorum.h"

namespace ps {
namespace internal {

uint64_t Job::SlowestWorkerSteps() const {
  return SlowestActive(
      num_workers,
      [&](uint32_t r) { return is_active[r].load(std::memory_order_relaxed); },
      [&](uint32_t r) { return counters.workers[r].Steps(); });
}

uint64_t Job::MinActiveClock() const {
  // Read here, under waits.mu: the lambdas below are other functions.
  const std::vector<uint8_t>& active = waits.active;
  const std::vector<uint64_t>& clock = waits.clock;
  return SlowestActive(
      num_workers, [&](uint32_t r) { return active[r] != 0; },
      [&](uint32_t r) { return clock[r]; });
}

uint64_t Job::LowestVersion() const {
  uint64_t version = UINT64_MAX;
  for (const std::shared_ptr<Chunk>& c : chunks) {
    version = std::min(version, c->version.load(std::memory_order_acquire));
  }
  return version == UINT64_MAX ? 0 : version;
}

bool Job::Serves(const Chunk& c) const {
  return !replicated || view->ActingPrimary(c.placement) == view->self();
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
