#include "common/process_tuning.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cstdlib>

#include "absl/synchronization/mutex.h"

namespace ps {

bool TuneProcessForThroughput() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  setenv("GRPC_EXPERIMENTS", kGrpcExperiments, /*overwrite=*/0);
#if defined(__GLIBC__)
  // Setting either threshold also turns off glibc's dynamic adjustment,
  // which would otherwise reset them after the first large free.
  return mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMmapThresholdBytes)) ==
             1 &&
         mallopt(M_TRIM_THRESHOLD, static_cast<int>(kTrimThresholdBytes)) == 1;
#else
  return true;
#endif
}

}  // namespace ps
