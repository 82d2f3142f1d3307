// Per-row optimizers of sparse embedding tables: the update a shard applies
// to one row when a push names the row's id.
//
//   RowOptimizerOptions o;
//   o.kind = RowOptimizerKind::kFtrl;
//   o.learning_rate = 0.05f;  // FTRL's alpha
//   o.l1 = 1.0f;
//   PS_ASSIGN_OR_RETURN(std::unique_ptr<RowOptimizer> opt,
//                       RowOptimizer::Create(o));
//   // The table keeps opt->StateFloatsPerRow(dim) floats beside each row,
//   // all zero when the row is created; for each unique pushed id:
//   opt->Update(row, state, summed_grad, dim);
//
// Lazy updates: only the rows a push names are touched. A row that is not
// pushed keeps its weights and state bit for bit: no decay, no step count.
// Every accumulator is stored as its increase over its initial value, so an
// all-zero state is a fresh row for every kind (the table never has to know
// an optimizer's initial values).
//
// Update rules per element (w = row[i], g = grad[i]; wd = weight_decay,
// lr = learning_rate, a0 = initial_accumulator; state layouts for dim d):
//   SGD      state: none
//            g += wd * w;  w -= lr * g
//   Adagrad  state: s[d], the accumulator is a0 + s
//            g += wd * w;  s += g * g;  w -= lr * g / (sqrt(a0 + s) + eps)
//   FTRL     state: z[d], s[d]; n = a0 + s.  McMahan et al. 2013, "Ad Click
//            Prediction: a View from the Trenches", Algorithm 1, alpha = lr:
//              sigma = (sqrt(n + g^2) - sqrt(n)) / lr;  z += g - sigma * w;
//              n += g^2;  w = |z| <= l1 ? 0
//                           : -(z - sign(z) l1) / ((beta + sqrt(n)) / lr + l2)
//            The row holds w, and w == that formula of (z, n) after every
//            update. A new row may start non-zero (random init): an element
//            whose s is still 0 (no non-zero gradient yet) has z taken as the
//            value whose formula gives the row's current weight,
//              z = -w ((beta + sqrt(n)) / lr + l2) - sign(w) l1,
//            so the invariant w == formula(z, n) holds from the start and
//            the first update moves the initial weight by about -g / denom
//            instead of discarding it. l1 keeps its meaning: a weight is
//            exactly 0 while |z| <= l1, so a zero-initialized row stays 0
//            until its gradients sum past l1, and a random one becomes 0
//            once its gradients drive it across 0 (an offset to the initial
//            value would instead shrink toward that value, never to 0). With
//            w = 0 this is z = 0: exactly the paper's algorithm, and
//            TensorFlow's Ftrl (which starts z at 0 whatever the weight, so
//            a random initial weight is pulled to about 0 on the first
//            update). An element whose g^2 is 0 (g is 0, or below 1e-19 and
//            flushed) is left unchanged, state included.
//   Adam     state: m[d], v[d], t; t counts this row's updates (a float
//            holding an integer; it stops at 2^24, where 1 - beta^t is 1 in
//            float for every beta <= 0.999998)
//            t += 1;  g += wd * w;  m = b1 m + (1 - b1) g;
//            v = b2 v + (1 - b2) g^2;
//            w -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
//            Bias correction uses the row's own t, as if each row ran its own
//            Adam over the steps that touched it; TensorFlow's LazyAdam uses
//            the global step instead, which under-corrects a row first seen
//            late in training. Epsilon sits outside the corrected sqrt(v) as
//            in PyTorch and the dense Adam (server/optimizer.h).
// Each update runs with subnormal results flushed to zero, so state that
// decays without gradients never computes at subnormal (slow) speed.
#ifndef SERVER_SPARSE_ROW_OPTIMIZER_H_
#define SERVER_SPARSE_ROW_OPTIMIZER_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ps {

enum class RowOptimizerKind {
  kUnspecified = 0,
  kSgd = 1,
  kAdagrad = 2,
  kFtrl = 3,
  kAdam = 4,
};

// "SGD", "ADAGRAD", "FTRL", "ADAM" (or the number for an unknown value).
std::string RowOptimizerKindName(RowOptimizerKind kind);

// The kind and its hyper-parameters. A field that the kind does not use must
// keep its default (a config that sets it expects an effect it would not
// get). Unset optional fields take the defaults named beside them.
struct RowOptimizerOptions {
  RowOptimizerKind kind = RowOptimizerKind::kUnspecified;
  // Every kind; FTRL's alpha. > 0 and finite.
  float learning_rate = 0.0f;
  // SGD, Adagrad, Adam: L2 added to the gradient of the rows a push touches
  // (untouched rows do not decay). >= 0.
  float weight_decay = 0.0f;
  // Adagrad: the accumulator's start; FTRL: n's start. >= 0.
  float initial_accumulator = 0.0f;
  // Adagrad (default kDefaultAdagradEpsilon, 1e-10) and Adam (default
  // kDefaultAdamEpsilon, 1e-8). > 0.
  std::optional<float> epsilon;
  // Adam, in [0, 1); defaults kDefaultAdamBeta1 (0.9), kDefaultAdamBeta2
  // (0.999).
  std::optional<float> beta1;
  std::optional<float> beta2;
  // FTRL's beta (>= 0, default kDefaultFtrlBeta) and its L1 and L2
  // strengths (>= 0). (beta + sqrt(initial_accumulator)) / learning_rate +
  // l2 must be > 0, or a row's first weight would divide by zero.
  std::optional<float> ftrl_beta;
  float l1 = 0.0f;
  float l2 = 0.0f;
};

// Applies one kind's update rule to single rows. Immutable after Create();
// every method is const and safe to call concurrently on different rows.
// The caller serializes updates of one row.
class RowOptimizer {
 public:
  // Validates `options` and fills the defaults of the kind's unset fields.
  // An Adam optimizer precomputes its bias corrections (256 KiB at most).
  // Bad values return kInvalidArgument naming the field, e.g.
  // "optimizer.learning_rate: must be > 0 and finite, got -1".
  static absl::StatusOr<std::unique_ptr<RowOptimizer>> Create(
      const RowOptimizerOptions& options);

  virtual ~RowOptimizer() = default;
  RowOptimizer(const RowOptimizer&) = delete;
  RowOptimizer& operator=(const RowOptimizer&) = delete;

  // The options with the kind's defaults filled in.
  const RowOptimizerOptions& options() const { return options_; }

  // Floats of state the table keeps per row of `dim` elements (layouts in
  // the file comment): SGD 0, Adagrad dim, FTRL 2 dim, Adam 2 dim + 1.
  // Requires dim >= 1.
  virtual int StateFloatsPerRow(int dim) const = 0;

  // Applies one update with gradient `grad` to `row` and its `state`, with
  // subnormal results flushed to zero (ScopedFlushDenormals) and the
  // caller's floating-point mode restored after. Requires: dim >= 1; row and
  // grad hold dim floats, state StateFloatsPerRow(dim), none aliasing
  // another; state is all zero for a new row, else what earlier Update calls
  // (or a checkpoint that passed CheckState) left. The caller rejects
  // non-finite gradients first: they make the row non-finite. Does not
  // block; never allocates.
  void Update(float* row, float* state, const float* grad, int dim) const;

  // Update without setting the floating-point mode, for a loop over many
  // rows that holds one ScopedFlushDenormals (server/optimizer.h) around
  // it. Same requirements as Update, plus that scope.
  virtual void UpdateInFlushScope(float* row, float* state, const float* grad,
                                  int dim) const = 0;

  // Checks a row's state read from outside (a checkpoint): finite, and
  // within what Update can produce (accumulators >= 0; Adam's t an integer
  // in [0, 2^24]). Returns kInvalidArgument naming the offending float,
  // e.g. "state[17] (v[1]): must be >= 0, got -2". Requires dim >= 1 and
  // StateFloatsPerRow(dim) readable floats.
  virtual absl::Status CheckState(const float* state, int dim) const = 0;

 protected:
  explicit RowOptimizer(const RowOptimizerOptions& options)
      : options_(options) {}

 private:
  const RowOptimizerOptions options_;
};

}  // namespace ps

#endif  // SERVER_SPARSE_ROW_OPTIMIZER_H_
