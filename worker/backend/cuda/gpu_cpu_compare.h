// The CUDA backend against the CPU backend on the same inputs, for
// gpu_check_benchmark: each backend call that a forward+backward of the MLP
// (784-256-128-10) and of the built-in CNN (configs/jobs/fashion_cnn.pbtxt)
// makes, at those models' shapes for a batch of kCompareBatch, and the two
// models' gradients, losses and counts through Model.
//
//   std::vector<Check> checks;
//   absl::Status s = CompareMlpOps(cpu.get(), gpu.get(), &checks);
//   for (const Check& c : checks) if (!c.pass()) ...
//
// Every figure is a max relative difference, max|gpu - cpu| / max|cpu| over
// one output (NaN when either side has a NaN: outputs are poisoned with NaN
// before each call, so an element a call never wrote shows). Its tolerance
// is 0 for the calls backend.h promises to give the same bits on every
// backend (element-wise, im2col/col2im, pooling) and kSumTolerance for those
// that sum in a device-specific order (GEMMs, column sums, softmax
// cross-entropy, whole models). A count (correct answers) compares as 0 when
// equal, 1 when not, against tolerance 0.

#ifndef WORKER_BACKEND_CUDA_GPU_CPU_COMPARE_H_
#define WORKER_BACKEND_CUDA_GPU_CPU_COMPARE_H_

#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "worker/backend/backend.h"

namespace ps {

inline constexpr int kCompareBatch = 64;
// The target for CUDA results against the CPU backend.
inline constexpr double kSumTolerance = 1e-5;

// One figure against its bound; pass() when within it.
struct Check {
  std::string group;  // "ops" (one backend call) or "models" (a Model)
  std::string name;
  double value = 0;
  double tolerance = 0;
  bool pass() const { return std::isfinite(value) && value <= tolerance; }
};

// max|got - want| / max|want|; NaN when a NaN is on either side or the sizes
// differ; all-zero `want` gives 0 for an all-zero `got`, else infinity.
double MaxRelativeDifference(const std::vector<float>& got,
                             const std::vector<float>& want);

// Append one Check per call (see the file comment); seeds are fixed. Errors
// are the backends' (an allocation, a failed call at Synchronize).
absl::Status CompareMlpOps(Backend* cpu, Backend* gpu,
                           std::vector<Check>* checks);
absl::Status CompareCnnOps(Backend* cpu, Backend* gpu,
                           std::vector<Check>* checks);

// For the MLP and the CNN: Model::ComputeGradient on both backends from the
// same parameters and batch (one Check per gradient tensor, the loss, the
// correct count), then Model::Evaluate (the forward loss).
absl::Status CompareModels(Backend* cpu, Backend* gpu,
                           std::vector<Check>* checks);

}  // namespace ps

#endif  // WORKER_BACKEND_CUDA_GPU_CPU_COMPARE_H_
