// A mark on an absl::Status: the server's considered answer, which a retry
// of the same call will not soon change (UNAVAILABLE from a job store that
// cannot commit), as opposed to UNAVAILABLE from a server that is starting
// or out of reach. grpc_status.h carries the mark across the wire; clients
// report such an answer instead of retrying it
// (CoordinatorClient::CallUntil) and say that the server gave it.
//
//   return NotRetryable(absl::UnavailableError("job store X: ..."));
//   if (IsNotRetryable(s)) ...  // reached the server; do not retry
//
// A second mark, PausedForReplacement: a shard's UNAVAILABLE for a push of
// a step at or past the one a live re-placement paused the job at
// (server/internal/validation.h PausedError). The worker's client retries
// it for as long as the job's step deadline allows (a pause lasts while the
// chunks that move are copied), not only rpc_max_attempts times.
#ifndef COMMON_NOT_RETRYABLE_H_
#define COMMON_NOT_RETRYABLE_H_

#include "absl/status/status.h"

namespace ps {

// `status` with the mark (OK stays OK).
absl::Status NotRetryable(absl::Status status);
bool IsNotRetryable(const absl::Status& status);

absl::Status PausedForReplacement(absl::Status status);
bool IsPausedForReplacement(const absl::Status& status);

}  // namespace ps

#endif  // COMMON_NOT_RETRYABLE_H_
