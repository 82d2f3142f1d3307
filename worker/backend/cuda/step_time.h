// Where a model's training step goes on a GPU, for gpu_check_benchmark:
//
//   absl::StatusOr<std::vector<StepTime>> t = TimeModelSteps(gpu.get());
//   // t->at(i).host_io_ms: the trainer's call (host parameters in, host
//   // gradient out) through the model's staging buffers; pinned_io_ms: the
//   // same with both host buffers pinned (Backend::PinHost), as the trainer
//   // runs it; resident_ms: the parameters already on the device and the
//   // gradient left there
//
// Each figure is the median of kStepTrials blocking calls after
// kStepWarmups, batch kStepBatch, random parameters and data, host clock.
// Their difference is what moving the parameters and the gradient through
// host memory costs per step; resident_ms is the compute alone.

#ifndef WORKER_BACKEND_CUDA_STEP_TIME_H_
#define WORKER_BACKEND_CUDA_STEP_TIME_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/backend/backend.h"

namespace ps {

inline constexpr int kStepBatch = 64;
inline constexpr int kStepWarmups = 5;
inline constexpr int kStepTrials = 31;

struct StepTime {
  std::string model;  // "mlp" (784-256-128-10) or "cnn" (the built-in one)
  size_t parameters = 0;
  double host_io_ms = 0;    // ComputeGradient from and to host memory
  double pinned_io_ms = 0;  // the same, host memory pinned
  double resident_ms = 0;   // SetParameters once, then ComputeDeviceGradient
};

// The MLP's and the CNN's steps on `gpu` (a "gpu:N" backend).
absl::StatusOr<std::vector<StepTime>> TimeModelSteps(Backend* gpu);

}  // namespace ps

#endif  // WORKER_BACKEND_CUDA_STEP_TIME_H_
