// Server-side optimizers: apply an aggregated gradient to one chunk of
// float32 parameters.
//
//   PS_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt,
//                       Optimizer::Create(job.optimizer()));
//   OptimizerState state = opt->NewState(chunk.size());
//   // BSP: `sum` holds the gradients of k workers, added in rank order.
//   opt->Apply(absl::MakeSpan(chunk), sum.data(), 1.0f / k, &state);
//
// Update rules (g = grad * grad_scale, p = parameter, t = updates applied to
// this chunk, counting this one):
//   SGD      g += wd * p; b = momentum * b + g;
//            p -= lr * (nesterov ? g + momentum * b : (momentum > 0 ? b : g))
//   Adagrad  g += wd * p; a += g * g; p -= lr * g / (sqrt(a) + eps)
//   Adam     g += wd * p; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
//            p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
//   AdamW    p *= 1 - lr * wd (decoupled), then Adam without the L2 term.
// These match PyTorch's SGD (dampening 0), Adagrad (lr_decay 0), Adam and
// AdamW.
//
// The per-chunk state lives outside the optimizer (OptimizerState), so one
// Optimizer serves every chunk of a job, and a chunk's Adam step count is its
// own: correct under any sharding.
#ifndef SERVER_OPTIMIZER_H_
#define SERVER_OPTIMIZER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/defaults.h"
#include "core/float_bytes.h"
#include "proto/job.pb.h"

namespace ps {

// One chunk's optimizer state. Which slots are used depends on the kind:
//   SGD with momentum: slots[0] = momentum buffer
//   Adagrad:           slots[0] = squared-gradient accumulator
//   Adam / AdamW:      slots[0] = first moment m, slots[1] = second moment v
// Each used slot has exactly the chunk's length. Plain value type; callers
// provide synchronization (one chunk is updated by one thread at a time).
struct OptimizerState {
  std::vector<std::vector<float>> slots;
  // Updates applied to this chunk (Adam's bias-correction t).
  uint64_t steps = 0;
};

// Applies one optimizer's update rule. Immutable after Create(); Apply() and
// every other method are const and safe to call concurrently on different
// states.
class Optimizer {
 public:
  // Validates `spec` and fills defaults. Bad values return kInvalidArgument
  // naming the field, e.g. "optimizer.learning_rate: must be > 0, got -1".
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(
      const OptimizerSpec& spec);

  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // The spec with every optional field set to its effective value.
  const OptimizerSpec& spec() const { return spec_; }

  // Number of float slots per parameter (0, 1 or 2).
  int num_slots() const { return num_slots_; }

  // Fresh state for a chunk of `length` floats (Adagrad's accumulator starts
  // at initial_accumulator, everything else at 0).
  OptimizerState NewState(size_t length) const;

  // Bytes NewState(length) occupies (for memory accounting).
  uint64_t StateBytes(uint64_t length) const;

  // Updates `params` in place with gradient `grad[i] * grad_scale` and
  // advances state->steps, with subnormal results flushed to zero
  // (ScopedFlushDenormals, below). Requires: grad points to params.size()
  // floats that do not alias params; *state came from NewState(params.size())
  // or ImportState(). Does not block; never allocates.
  void Apply(absl::Span<float> params, const float* grad, float grad_scale,
             OptimizerState* state) const;

  // Serializes a state (for checkpoints): a versioned little-endian binary
  // format that records the kind and the length, so a mismatched import is
  // detected.
  std::string ExportState(const OptimizerState& state) const;

  // Inverse of ExportState. Fails with kInvalidArgument (and leaves *state
  // untouched) when `bytes` is truncated, corrupt, from another optimizer
  // kind or for another length.
  absl::Status ImportState(absl::string_view bytes, size_t length,
                           OptimizerState* state) const;

 protected:
  Optimizer(const OptimizerSpec& spec, int num_slots)
      : spec_(spec), num_slots_(num_slots) {}

  // The update rule itself (Apply's contract).
  virtual void Update(absl::Span<float> params, const float* grad,
                      float grad_scale, OptimizerState* state) const = 0;

 private:
  const OptimizerSpec spec_;
  const int num_slots_;
};

// acc[i] += x[i] for every i: the BSP aggregation step (gradients are added
// in worker-rank order into the first one). Requires x to hold acc.size()
// floats not aliasing acc. Vectorized; never allocates.
void AddInto(absl::Span<float> acc, const float* x);
// The same sums, bit for bit, for a little-endian float32 payload in pieces
// (x.size() == 4 * acc.size()).
void AddInto(absl::Span<float> acc, const BytePieces& x);

// While alive, the calling thread flushes subnormal float results to zero
// and reads subnormal inputs as zero (x86 MXCSR FTZ + DAZ; a no-op
// elsewhere), then restores its previous mode. Optimizer::Apply runs under
// it: an entry that gets no gradient for hundreds of steps (top-k pushes,
// sparse features) decays its momentum into subnormals, which x86 computes
// 10-100x slower. Values at or above FLT_MIN (1.2e-38) compute
// exactly as before, so BSP stays bitwise reproducible. TensorFlow's
// ScopedFlushDenormal does the same.
class ScopedFlushDenormals {
 public:
  ScopedFlushDenormals();
  ~ScopedFlushDenormals();
  ScopedFlushDenormals(const ScopedFlushDenormals&) = delete;
  ScopedFlushDenormals& operator=(const ScopedFlushDenormals&) = delete;

 private:
  unsigned int saved_ = 0;
};

}  // namespace ps

#endif  // SERVER_OPTIMIZER_H_
