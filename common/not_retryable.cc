#include "common/not_retryable.h"

#include "absl/strings/cord.h"

namespace ps {
namespace {

constexpr char kNotRetryableUrl[] = "type.ps/not_retryable";
constexpr char kPausedUrl[] = "type.ps/paused_for_replacement";

}  // namespace

absl::Status NotRetryable(absl::Status status) {
  if (!status.ok()) status.SetPayload(kNotRetryableUrl, absl::Cord("1"));
  return status;
}

bool IsNotRetryable(const absl::Status& status) {
  return status.GetPayload(kNotRetryableUrl).has_value();
}

absl::Status PausedForReplacement(absl::Status status) {
  if (!status.ok()) status.SetPayload(kPausedUrl, absl::Cord("1"));
  return status;
}

bool IsPausedForReplacement(const absl::Status& status) {
  return status.GetPayload(kPausedUrl).has_value();
}

}  // namespace ps
