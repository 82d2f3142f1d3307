#include "common/grpc_status.h"

#include <string>

namespace ps {
namespace {

// The grpc error_details that carry the NotRetryable mark.
constexpr char kNotRetryableDetails[] = "ps:not_retryable";

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()),
                      IsNotRetryable(status) ? kNotRetryableDetails : "");
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  absl::Status s(static_cast<absl::StatusCode>(status.error_code()),
                 status.error_message());
  return status.error_details() == kNotRetryableDetails ? NotRetryable(s) : s;
}

}  // namespace ps
