// Admission limits the psd's ParameterServer service applies before a
// request reaches the Shard: bounds that keep one small, authenticated but
// hostile request from making the daemon allocate without limit.
//
//   PS_RETURN_IF_ERROR(CheckRegisterJobLimits(request));
//   return shard->RegisterJob(request, &response);
//
// The Shard validates everything else (and refuses what these let through
// when it is inconsistent); these checks only bound sizes, with the same
// limits the coordinator applies at submit (kMaxNumWorkers, kMaxChunks), so
// a job the coordinator accepted always passes.
#ifndef SERVER_RPC_REQUEST_LIMITS_H_
#define SERVER_RPC_REQUEST_LIMITS_H_

#include "absl/status/status.h"
#include "proto/ps.pb.h"

namespace ps {

// INVALID_ARGUMENT naming the field when num_workers (request or spec)
// exceeds kMaxNumWorkers, or the placement or the spec's tensors would make
// more than kMaxChunks chunks. Per-chunk and per-worker state is allocated
// before the memory budget can refuse it, so these are what bound it.
// Cheap (no allocation, linear in the number of tensor dimensions); pure
// and thread-safe.
absl::Status CheckRegisterJobLimits(const RegisterJobRequest& request);

}  // namespace ps

#endif  // SERVER_RPC_REQUEST_LIMITS_H_
