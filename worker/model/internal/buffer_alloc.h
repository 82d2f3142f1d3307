// Allocation helpers of the models' Create(): many buffers in a row, the
// first failure kept, the rest skipped.
//
//   absl::Status status;
//   AllocInto(backend, n, &activations, &status);
//   AllocHostInto(backend, n, &staging, &status);
//   PS_RETURN_IF_ERROR(status);
#ifndef WORKER_MODEL_INTERNAL_BUFFER_ALLOC_H_
#define WORKER_MODEL_INTERNAL_BUFFER_ALLOC_H_

#include <cstddef>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/backend/backend.h"

namespace ps {
namespace model_internal {

// Allocates n elements into *out, keeping the first failure in *status.
template <typename T>
void AllocInto(Backend* backend, size_t n, DeviceBuffer<T>* out,
               absl::Status* status) {
  if (!status->ok()) return;
  absl::StatusOr<DeviceBuffer<T>> b = backend->Allocate<T>(n);
  if (!b.ok()) {
    *status = b.status();
    return;
  }
  *out = *std::move(b);
}

// The same for page-locked (CUDA) or plain host staging memory.
template <typename T>
void AllocHostInto(Backend* backend, size_t n, HostBuffer<T>* out,
                   absl::Status* status) {
  if (!status->ok()) return;
  absl::StatusOr<HostBuffer<T>> b = backend->AllocateHost<T>(n);
  if (!b.ok()) {
    *status = b.status();
    return;
  }
  *out = *std::move(b);
}

}  // namespace model_internal
}  // namespace ps

#endif  // WORKER_MODEL_INTERNAL_BUFFER_ALLOC_H_
