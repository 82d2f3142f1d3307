#include "server/sparse/row_optimizer.h"

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/defaults.h"
#include "common/status_macros.h"
#include "server/optimizer.h"

namespace ps {
namespace {

// The update loops: contiguous and branch-free per element, on __restrict
// pointers, so the compiler vectorizes them (HOT_LOOP_COPTS in BUILD).

void SgdKernel(int n, float* __restrict w, const float* __restrict grad,
               float lr, float wd) {
  for (int i = 0; i < n; ++i) {
    const float g = grad[i] + wd * w[i];
    w[i] = w[i] - lr * g;
  }
}

void AdagradKernel(int n, float* __restrict w, const float* __restrict grad,
                   float* __restrict s, float lr, float wd, float a0,
                   float eps) {
  for (int i = 0; i < n; ++i) {
    const float g = grad[i] + wd * w[i];
    const float si = s[i] + g * g;
    s[i] = si;
    w[i] = w[i] - lr * g / (std::sqrt(a0 + si) + eps);
  }
}

// sign(x) * l1, with sign(0) = 0.
inline float SignedL1(float x, float l1) {
  return x > 0.0f ? l1 : (x < 0.0f ? -l1 : 0.0f);
}

// The rule in the header; inv_lr = 1 / alpha.
void FtrlKernel(int n, float* __restrict w, const float* __restrict grad,
                float* __restrict z, float* __restrict s, float inv_lr,
                float beta, float l1, float l2, float a0) {
  for (int i = 0; i < n; ++i) {
    const float wi = w[i];
    const float g = grad[i];
    const float s_old = s[i];
    const float sqrt_old = std::sqrt(a0 + s_old);
    // An element that never had a non-zero gradient: the z whose weight is
    // the row's current (initial) weight.
    const float z_fresh =
        -wi * ((beta + sqrt_old) * inv_lr + l2) - SignedL1(wi, l1);
    const float z_old = s_old == 0.0f ? z_fresh : z[i];
    const float g2 = g * g;
    const float s_new = s_old + g2;
    const float sqrt_new = std::sqrt(a0 + s_new);
    const float sigma = (sqrt_new - sqrt_old) * inv_lr;
    const float z_new = z_old + g - sigma * wi;
    const float denom = (beta + sqrt_new) * inv_lr + l2;
    const float w_new =
        std::fabs(z_new) <= l1 ? 0.0f : -(z_new - SignedL1(z_new, l1)) / denom;
    const bool moved = g2 != 0.0f;
    w[i] = moved ? w_new : wi;
    z[i] = moved ? z_new : z[i];
    s[i] = moved ? s_new : s_old;
  }
}

void AdamKernel(int n, float* __restrict w, const float* __restrict grad,
                float* __restrict m, float* __restrict v, float b1, float b2,
                float eps, float step_size, float inv_sqrt_bc2, float wd) {
  const float omb1 = 1.0f - b1;
  const float omb2 = 1.0f - b2;
  for (int i = 0; i < n; ++i) {
    const float x = w[i];
    const float g = grad[i] + wd * x;
    const float mi = b1 * m[i] + omb1 * g;
    const float vi = b2 * v[i] + omb2 * g * g;
    m[i] = mi;
    v[i] = vi;
    w[i] = x - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

// Adam's t stops here: float counts every integer up to it, and t + 1 rounds
// back to it.
constexpr float kMaxAdamStep = 16777216.0f;  // 2^24

std::string Num(float x) { return absl::StrFormat("%g", x); }

absl::Status BadState(int index, absl::string_view slot, int element,
                      absl::string_view why, float value) {
  return absl::InvalidArgumentError(absl::StrCat("state[", index, "] (", slot,
                                                 "[", element, "]): ", why,
                                                 ", got ", Num(value)));
}

// Checks state[offset, offset + dim): finite, and >= 0 if `non_negative`.
absl::Status CheckSlot(const float* state, int offset, int dim,
                       absl::string_view slot, bool non_negative) {
  for (int i = 0; i < dim; ++i) {
    const float x = state[offset + i];
    if (!std::isfinite(x)) {
      return BadState(offset + i, slot, i, "must be finite", x);
    }
    if (non_negative && x < 0) {
      return BadState(offset + i, slot, i, "must be >= 0", x);
    }
  }
  return absl::OkStatus();
}

class SgdRows final : public RowOptimizer {
 public:
  explicit SgdRows(const RowOptimizerOptions& o) : RowOptimizer(o) {}

  int StateFloatsPerRow(int dim) const override { return 0; }

  void UpdateInFlushScope(float* row, float* state, const float* grad,
                          int dim) const override {
    SgdKernel(dim, row, grad, options().learning_rate, options().weight_decay);
  }

  absl::Status CheckState(const float* state, int dim) const override {
    return absl::OkStatus();
  }
};

class AdagradRows final : public RowOptimizer {
 public:
  explicit AdagradRows(const RowOptimizerOptions& o) : RowOptimizer(o) {}

  int StateFloatsPerRow(int dim) const override { return dim; }

  void UpdateInFlushScope(float* row, float* state, const float* grad,
                          int dim) const override {
    const RowOptimizerOptions& o = options();
    AdagradKernel(dim, row, grad, state, o.learning_rate, o.weight_decay,
                  o.initial_accumulator, *o.epsilon);
  }

  absl::Status CheckState(const float* state, int dim) const override {
    return CheckSlot(state, 0, dim, "s", /*non_negative=*/true);
  }
};

class FtrlRows final : public RowOptimizer {
 public:
  explicit FtrlRows(const RowOptimizerOptions& o)
      : RowOptimizer(o), inv_lr_(1.0f / o.learning_rate) {}

  int StateFloatsPerRow(int dim) const override { return 2 * dim; }

  void UpdateInFlushScope(float* row, float* state, const float* grad,
                          int dim) const override {
    const RowOptimizerOptions& o = options();
    FtrlKernel(dim, row, grad, state, state + dim, inv_lr_, *o.ftrl_beta, o.l1,
               o.l2, o.initial_accumulator);
  }

  absl::Status CheckState(const float* state, int dim) const override {
    PS_RETURN_IF_ERROR(CheckSlot(state, 0, dim, "z", /*non_negative=*/false));
    return CheckSlot(state, dim, dim, "s", /*non_negative=*/true);
  }

 private:
  const float inv_lr_;
};

// Adam's bias corrections for steps 1..kMaxCachedAdamSteps are computed
// once per optimizer (256 KiB at most): two expm1 per row would double the
// cost of a dim-16 update.
constexpr int kMaxCachedAdamSteps = 1 << 15;

class AdamRows final : public RowOptimizer {
 public:
  explicit AdamRows(const RowOptimizerOptions& o)
      : RowOptimizer(o),
        log_b1_(std::log(static_cast<double>(*o.beta1))),
        log_b2_(std::log(static_cast<double>(*o.beta2))) {
    // Both factors fall monotonically toward (lr, 1) as t grows; once float
    // rounding reaches them they stay, so the last entry serves every later
    // t and the cache changes no result.
    const Corrections limit{o.learning_rate, 1.0f};
    for (int t = 1; t <= kMaxCachedAdamSteps; ++t) {
      cache_.push_back(Compute(t));
      if (cache_.back() == limit) {
        cache_covers_all_ = true;
        break;
      }
    }
  }

  int StateFloatsPerRow(int dim) const override { return 2 * dim + 1; }

  void UpdateInFlushScope(float* row, float* state, const float* grad,
                          int dim) const override {
    const RowOptimizerOptions& o = options();
    const float t = state[2 * dim] + 1.0f;  // saturates at kMaxAdamStep
    state[2 * dim] = t;
    const size_t cached = cache_.size();
    const Corrections c = t <= cached ? cache_[static_cast<size_t>(t) - 1]
                          : cache_covers_all_ ? cache_.back()
                                              : Compute(t);
    AdamKernel(dim, row, grad, state, state + dim, *o.beta1, *o.beta2,
               *o.epsilon, c.step_size, c.inv_sqrt_bc2, o.weight_decay);
  }

  absl::Status CheckState(const float* state, int dim) const override {
    PS_RETURN_IF_ERROR(CheckSlot(state, 0, dim, "m", /*non_negative=*/false));
    PS_RETURN_IF_ERROR(CheckSlot(state, dim, dim, "v", /*non_negative=*/true));
    const float t = state[2 * dim];
    if (!(t >= 0 && t <= kMaxAdamStep) || t != std::floor(t)) {
      return BadState(2 * dim, "t", 0, "must be an integer in [0, 2^24]", t);
    }
    return absl::OkStatus();
  }

 private:
  // lr / (1 - b1^t) and 1 / sqrt(1 - b2^t).
  struct Corrections {
    float step_size;
    float inv_sqrt_bc2;
    bool operator==(const Corrections& o) const {
      return step_size == o.step_size && inv_sqrt_bc2 == o.inv_sqrt_bc2;
    }
  };

  Corrections Compute(double t) const {
    // 1 - b^t in double via expm1: keeps its digits for small t, and b = 0
    // (log -inf) gives exactly 1.
    const double bc1 = -std::expm1(t * log_b1_);
    const double bc2 = -std::expm1(t * log_b2_);
    return {static_cast<float>(options().learning_rate / bc1),
            static_cast<float>(1.0 / std::sqrt(bc2))};
  }

  const double log_b1_;
  const double log_b2_;
  std::vector<Corrections> cache_;  // cache_[t - 1]; filled by the constructor
  bool cache_covers_all_ = false;   // cache_.back() holds for every larger t
};

// ---- Validation -------------------------------------------------------------

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("optimizer.", field, ": ", why));
}

absl::Status CheckNonNegative(absl::string_view field, float x) {
  if (!std::isfinite(x) || x < 0) {
    return Bad(field, "must be >= 0 and finite, got " + Num(x));
  }
  return absl::OkStatus();
}

// > 0, finite and a normal float: the update runs with subnormal inputs read
// as zero, and a zero learning rate or epsilon would divide by zero.
absl::Status CheckPositive(absl::string_view field, float x) {
  if (!std::isfinite(x) || !(x > 0)) {
    return Bad(field, "must be > 0 and finite, got " + Num(x));
  }
  if (x < FLT_MIN) {
    return Bad(field, absl::StrCat("must be at least ", Num(FLT_MIN),
                                   " (a normal float), got ", Num(x)));
  }
  return absl::OkStatus();
}

absl::Status CheckBeta(absl::string_view field, float b) {
  if (!std::isfinite(b) || b < 0 || b >= 1) {
    return Bad(field, "must be in [0, 1), got " + Num(b));
  }
  return absl::OkStatus();
}

// A field the kind would silently ignore must keep its default.
absl::Status CheckUnused(absl::string_view field, bool is_set,
                         RowOptimizerKind kind, absl::string_view users) {
  if (!is_set) return absl::OkStatus();
  return Bad(field, absl::StrCat("not used by ", RowOptimizerKindName(kind),
                                 " (only by ", users, "); leave it unset"));
}

absl::Status CheckFieldsOfOtherKinds(const RowOptimizerOptions& o) {
  using K = RowOptimizerKind;
  const K k = o.kind;
  PS_RETURN_IF_ERROR(CheckUnused("weight_decay",
                                 k == K::kFtrl && o.weight_decay != 0, k,
                                 "SGD, ADAGRAD and ADAM; FTRL has l2"));
  PS_RETURN_IF_ERROR(CheckUnused(
      "initial_accumulator",
      k != K::kAdagrad && k != K::kFtrl && o.initial_accumulator != 0, k,
      "ADAGRAD and FTRL"));
  PS_RETURN_IF_ERROR(CheckUnused(
      "epsilon", k != K::kAdagrad && k != K::kAdam && o.epsilon.has_value(), k,
      "ADAGRAD and ADAM"));
  PS_RETURN_IF_ERROR(
      CheckUnused("beta1", k != K::kAdam && o.beta1.has_value(), k, "ADAM"));
  PS_RETURN_IF_ERROR(
      CheckUnused("beta2", k != K::kAdam && o.beta2.has_value(), k, "ADAM"));
  PS_RETURN_IF_ERROR(CheckUnused(
      "ftrl_beta", k != K::kFtrl && o.ftrl_beta.has_value(), k, "FTRL"));
  PS_RETURN_IF_ERROR(CheckUnused("l1", k != K::kFtrl && o.l1 != 0, k, "FTRL"));
  return CheckUnused("l2", k != K::kFtrl && o.l2 != 0, k, "FTRL");
}

// Fills the kind's defaults into *o and checks every field.
absl::Status FillAndCheck(RowOptimizerOptions* o) {
  using K = RowOptimizerKind;
  const K k = o->kind;
  if (k != K::kSgd && k != K::kAdagrad && k != K::kFtrl && k != K::kAdam) {
    return Bad("kind", "must be SGD, ADAGRAD, FTRL or ADAM, got " +
                           RowOptimizerKindName(k));
  }
  PS_RETURN_IF_ERROR(CheckPositive("learning_rate", o->learning_rate));
  PS_RETURN_IF_ERROR(CheckNonNegative("weight_decay", o->weight_decay));
  PS_RETURN_IF_ERROR(
      CheckNonNegative("initial_accumulator", o->initial_accumulator));
  PS_RETURN_IF_ERROR(CheckNonNegative("l1", o->l1));
  PS_RETURN_IF_ERROR(CheckNonNegative("l2", o->l2));
  PS_RETURN_IF_ERROR(CheckFieldsOfOtherKinds(*o));
  if (k == K::kAdagrad && !o->epsilon) o->epsilon = kDefaultAdagradEpsilon;
  if (k == K::kAdam) {
    if (!o->epsilon) o->epsilon = kDefaultAdamEpsilon;
    if (!o->beta1) o->beta1 = kDefaultAdamBeta1;
    if (!o->beta2) o->beta2 = kDefaultAdamBeta2;
    PS_RETURN_IF_ERROR(CheckBeta("beta1", *o->beta1));
    PS_RETURN_IF_ERROR(CheckBeta("beta2", *o->beta2));
  }
  if (o->epsilon) PS_RETURN_IF_ERROR(CheckPositive("epsilon", *o->epsilon));
  if (k == K::kFtrl) {
    if (!o->ftrl_beta) o->ftrl_beta = kDefaultFtrlBeta;
    PS_RETURN_IF_ERROR(CheckNonNegative("ftrl_beta", *o->ftrl_beta));
    const double first_denominator =
        (*o->ftrl_beta +
         std::sqrt(static_cast<double>(o->initial_accumulator))) /
            o->learning_rate +
        o->l2;
    if (!(first_denominator > 0)) {
      return Bad("ftrl_beta",
                 "FTRL needs ftrl_beta > 0, l2 > 0 or initial_accumulator > 0 "
                 "(a new row's weight divides by (ftrl_beta + "
                 "sqrt(initial_accumulator)) / learning_rate + l2)");
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string RowOptimizerKindName(RowOptimizerKind kind) {
  switch (kind) {
    case RowOptimizerKind::kSgd:
      return "SGD";
    case RowOptimizerKind::kAdagrad:
      return "ADAGRAD";
    case RowOptimizerKind::kFtrl:
      return "FTRL";
    case RowOptimizerKind::kAdam:
      return "ADAM";
    case RowOptimizerKind::kUnspecified:
      return "UNSPECIFIED";
  }
  return absl::StrCat(static_cast<int>(kind));
}

absl::StatusOr<std::unique_ptr<RowOptimizer>> RowOptimizer::Create(
    const RowOptimizerOptions& options) {
  RowOptimizerOptions o = options;
  PS_RETURN_IF_ERROR(FillAndCheck(&o));
  switch (o.kind) {
    case RowOptimizerKind::kSgd:
      return std::unique_ptr<RowOptimizer>(new SgdRows(o));
    case RowOptimizerKind::kAdagrad:
      return std::unique_ptr<RowOptimizer>(new AdagradRows(o));
    case RowOptimizerKind::kFtrl:
      return std::unique_ptr<RowOptimizer>(new FtrlRows(o));
    default:
      return std::unique_ptr<RowOptimizer>(new AdamRows(o));
  }
}

void RowOptimizer::Update(float* row, float* state, const float* grad,
                          int dim) const {
  ScopedFlushDenormals flush;
  UpdateInFlushScope(row, state, grad, dim);
}

}  // namespace ps
