// Defaults of JobSpec fields (documented in proto/job.proto) that both the
// coordinator (which fills them in) and the shards (which guard against
// specs that bypass it) rely on.
#ifndef COMMON_JOB_DEFAULTS_H_
#define COMMON_JOB_DEFAULTS_H_

#include <cstdint>

namespace ps {

inline constexpr uint32_t kDefaultStepDeadlineMs = 60000;
inline constexpr uint64_t kDefaultPartitionBytes = 1u << 20;

}  // namespace ps

#endif  // COMMON_JOB_DEFAULTS_H_
