// The one place that converts between absl::Status and grpc::Status.
//
//   grpc::Status s = ToGrpcStatus(shard->Push(req, &resp));
//   absl::Status back = FromGrpcStatus(s);
#ifndef COMMON_GRPC_STATUS_H_
#define COMMON_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "common/not_retryable.h"
#include "grpcpp/support/status.h"

namespace ps {

// Codes map one to one (both follow google.rpc.Code); the message is kept,
// and so is the NotRetryable mark (not_retryable.h; as grpc error_details).
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace ps

#endif  // COMMON_GRPC_STATUS_H_
