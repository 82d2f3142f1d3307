// GpuReducer: sums a gradient across one machine's GPUs in place, with NCCL
// all-reduce on each backend's compute stream (so it orders with that
// backend's compute and completes at its Synchronize()).
//
//   std::vector<Backend*> gpus = {gpu0.get(), gpu1.get()};
//   absl::StatusOr<std::unique_ptr<GpuReducer>> r = GpuReducer::Create(gpus);
//   // on device thread i:
//   PS_RETURN_IF_ERROR((*r)->AllReduceSum(i, grad_i, n));
//   PS_RETURN_IF_ERROR((*r)->Wait(i, absl::Now() + timeout));
//   // grad_i now holds the sum
//
// Wait, unlike the backend's Synchronize(), cannot hang: it watches NCCL's
// asynchronous error (ncclCommGetAsyncError) while it waits, and aborts the
// communicator at the deadline. Without NCCL in the build (PS_HAVE_NCCL, set
// by cuda_configure.bzl) Create returns kFailedPrecondition.

#ifndef WORKER_BACKEND_CUDA_GPU_REDUCER_H_
#define WORKER_BACKEND_CUDA_GPU_REDUCER_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/backend/backend.h"
#include "worker/backend/cuda/cuda_backend.h"

namespace ps {

// Thread-safe in the sense LocalReducer requires: rank r is driven by rank
// r's device thread; distinct ranks call concurrently.
class GpuReducer final : public LocalReducer {
 public:
  // One NCCL communicator per backend (rank = index). Every backend must be a
  // CudaBackend on a distinct GPU and must outlive the reducer.
  // kInvalidArgument otherwise (the offending index named),
  // kFailedPrecondition without NCCL, kInternal when NCCL setup fails.
  static absl::StatusOr<std::unique_ptr<GpuReducer>> Create(
      const std::vector<Backend*>& backends);
  ~GpuReducer() override;

  int num_ranks() const override { return static_cast<int>(backends_.size()); }

  // See LocalReducer::AllReduceSum. With more than one rank, every rank must
  // call concurrently from its own thread.
  absl::Status AllReduceSum(int rank, float* data, size_t n) override;

  // See LocalReducer::Wait.
  absl::Status Wait(int rank, absl::Time deadline) override;

  // All ranks at once from ONE thread (data[r] on rank r's GPU), as one NCCL
  // group; complete at each backend's Synchronize().
  absl::Status AllReduceSumAll(const std::vector<float*>& data, size_t n);

 private:
  struct Comms;  // the NCCL communicators, one per rank
  GpuReducer(std::vector<CudaBackend*> backends, std::unique_ptr<Comms> comms);
  // kInvalidArgument for a rank out of range, kFailedPrecondition once its
  // communicator was aborted.
  absl::Status CheckRank(int rank) const;
  // Aborts rank's communicator; `why` is returned and kept for later calls.
  absl::Status Abort(int rank, absl::Status why);

  std::vector<CudaBackend*> backends_;  // borrowed
  std::unique_ptr<Comms> comms_;
};

}  // namespace ps

#endif  // WORKER_BACKEND_CUDA_GPU_REDUCER_H_
