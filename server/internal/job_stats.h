// A job's statistics (proto JobStats; server/shard.h documents the fields
// beyond the proto's comments). Internal to the shard.
//
// Thread safety: any thread; takes each chunk's mutex in turn (never
// blocks on a push longer than one chunk's apply) and WaitState::mu once.
#ifndef SERVER_INTERNAL_JOB_STATS_H_
#define SERVER_INTERNAL_JOB_STATS_H_

#include "proto/ps.pb.h"
#include "server/internal/job.h"

namespace ps {
namespace internal {

// Fills `js` completely for `job`.
void FillJobStats(const Job& job, JobStats* js);

}  // namespace internal
}  // namespace ps

#endif  // SERVER_INTERNAL_JOB_STATS_H_
