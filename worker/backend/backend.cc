#include "worker/backend/backend.h"

#include "absl/strings/str_cat.h"

namespace ps {

absl::Status Backend::PinHost(void* host, size_t bytes) {
  if (host_memory()) return absl::OkStatus();
  if (host == nullptr || bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(device(), ": PinHost: null or empty range"));
  }
  const char* begin = static_cast<const char*>(host);
  absl::MutexLock lock(&pin_mu_);
  for (const auto& [b, n] : pinned_) {
    if (begin < b + n && b < begin + bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          device(), ": PinHost: the range overlaps one already pinned"));
    }
  }
  PS_RETURN_IF_ERROR(PinHostBytes(host, bytes));
  pinned_.emplace_back(begin, bytes);
  return absl::OkStatus();
}

void Backend::UnpinHost(void* host) {
  absl::MutexLock lock(&pin_mu_);
  for (auto it = pinned_.begin(); it != pinned_.end(); ++it) {
    if (it->first == host) {
      UnpinHostBytes(host);
      pinned_.erase(it);
      return;
    }
  }
}

bool Backend::IsPinned(const void* host, size_t bytes) const {
  const char* begin = static_cast<const char*>(host);
  absl::MutexLock lock(&pin_mu_);
  for (const auto& [b, n] : pinned_) {
    if (begin >= b && begin + bytes <= b + n) return true;
  }
  return false;
}

void Backend::UnpinAllHost() {
  absl::MutexLock lock(&pin_mu_);
  for (const auto& range : pinned_) {
    UnpinHostBytes(const_cast<char*>(range.first));
  }
  pinned_.clear();
}

}  // namespace ps
