#include "common/grpc_status.h"

#include <string>

namespace ps {
namespace {

// The grpc error_details that carry the NotRetryable and
// PausedForReplacement marks.
constexpr char kNotRetryableDetails[] = "ps:not_retryable";
constexpr char kPausedDetails[] = "ps:paused_for_replacement";

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const char* details = IsNotRetryable(status)           ? kNotRetryableDetails
                        : IsPausedForReplacement(status) ? kPausedDetails
                                                         : "";
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()), details);
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  absl::Status s(static_cast<absl::StatusCode>(status.error_code()),
                 status.error_message());
  if (status.error_details() == kNotRetryableDetails) return NotRetryable(s);
  if (status.error_details() == kPausedDetails) return PausedForReplacement(s);
  return s;
}

}  // namespace ps
