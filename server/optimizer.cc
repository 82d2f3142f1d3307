#include "server/optimizer.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "core/float_bytes.h"
#include "server/internal/le_bytes.h"

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace ps {
namespace {

using internal::GetLe;
using internal::PutLe;

// The apply loops: contiguous, branch-free per element (every hyperparameter
// decision is a template argument or a loop-invariant constant), written on
// __restrict pointers so the compiler vectorizes them.

template <bool kMomentum, bool kNesterov>
void SgdKernel(size_t n, float* __restrict p, const float* __restrict grad,
               float* __restrict buf, float scale, float lr, float wd,
               float mu) {
  for (size_t i = 0; i < n; ++i) {
    const float g = grad[i] * scale + wd * p[i];
    float d = g;
    if (kMomentum) {
      const float b = mu * buf[i] + g;
      buf[i] = b;
      d = kNesterov ? g + mu * b : b;
    }
    p[i] = p[i] - lr * d;
  }
}

void AdagradKernel(size_t n, float* __restrict p, const float* __restrict grad,
                   float* __restrict acc, float scale, float lr, float wd,
                   float eps) {
  for (size_t i = 0; i < n; ++i) {
    const float g = grad[i] * scale + wd * p[i];
    const float a = acc[i] + g * g;
    acc[i] = a;
    p[i] = p[i] - lr * g / (std::sqrt(a) + eps);
  }
}

// kDecoupled: AdamW (decoupled decay) instead of Adam (L2 in the gradient).
template <bool kDecoupled>
void AdamKernel(size_t n, float* __restrict p, const float* __restrict grad,
                float* __restrict m, float* __restrict v, float scale, float b1,
                float b2, float eps, float step_size, float inv_sqrt_bc2,
                float l2, float decay) {
  // AdamW decays by x - (lr * wd) * x rather than x * (1 - lr * wd): the
  // float nearest 1 - 1e-4 is off by 3e-4 of the decay itself, an error that
  // adds up every step, while lr * wd is exact to float precision.
  const float omb1 = 1.0f - b1;
  const float omb2 = 1.0f - b2;
  for (size_t i = 0; i < n; ++i) {
    float x = p[i];
    float g = grad[i] * scale;
    if (kDecoupled) {
      x = x - decay * x;
    } else {
      g = g + l2 * x;
    }
    const float mi = b1 * m[i] + omb1 * g;
    const float vi = b2 * v[i] + omb2 * g * g;
    m[i] = mi;
    v[i] = vi;
    p[i] = x - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

class Sgd final : public Optimizer {
 public:
  explicit Sgd(const OptimizerSpec& spec)
      : Optimizer(spec, spec.momentum() > 0 ? 1 : 0) {}

  void Update(absl::Span<float> params, const float* grad, float grad_scale,
              OptimizerState* state) const override {
    const OptimizerSpec& s = spec();
    float* buf = num_slots() > 0 ? state->slots[0].data() : nullptr;
    if (num_slots() == 0) {
      SgdKernel<false, false>(params.size(), params.data(), grad, buf,
                              grad_scale, s.learning_rate(), s.weight_decay(),
                              0.0f);
    } else if (s.nesterov()) {
      SgdKernel<true, true>(params.size(), params.data(), grad, buf, grad_scale,
                            s.learning_rate(), s.weight_decay(), s.momentum());
    } else {
      SgdKernel<true, false>(params.size(), params.data(), grad, buf,
                             grad_scale, s.learning_rate(), s.weight_decay(),
                             s.momentum());
    }
    ++state->steps;
  }
};

class Adagrad final : public Optimizer {
 public:
  explicit Adagrad(const OptimizerSpec& spec) : Optimizer(spec, 1) {}

  void Update(absl::Span<float> params, const float* grad, float grad_scale,
              OptimizerState* state) const override {
    const OptimizerSpec& s = spec();
    AdagradKernel(params.size(), params.data(), grad, state->slots[0].data(),
                  grad_scale, s.learning_rate(), s.weight_decay(), s.epsilon());
    ++state->steps;
  }
};

class Adam final : public Optimizer {
 public:
  Adam(const OptimizerSpec& spec, bool decoupled)
      : Optimizer(spec, 2), decoupled_(decoupled) {}

  void Update(absl::Span<float> params, const float* grad, float grad_scale,
              OptimizerState* state) const override {
    const OptimizerSpec& s = spec();
    const uint64_t t = ++state->steps;
    // Bias corrections in double: b^t underflows gracefully and 1 - b^t keeps
    // its digits for small t.
    const double bc1 =
        1.0 - std::pow(static_cast<double>(s.beta1()), static_cast<double>(t));
    const double bc2 =
        1.0 - std::pow(static_cast<double>(s.beta2()), static_cast<double>(t));
    const float step_size = static_cast<float>(s.learning_rate() / bc1);
    const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
    float* m = state->slots[0].data();
    float* v = state->slots[1].data();
    if (decoupled_) {
      const float decay = static_cast<float>(
          static_cast<double>(s.learning_rate()) * s.weight_decay());
      AdamKernel<true>(params.size(), params.data(), grad, m, v, grad_scale,
                       s.beta1(), s.beta2(), s.epsilon(), step_size,
                       inv_sqrt_bc2, 0.0f, decay);
    } else {
      AdamKernel<false>(params.size(), params.data(), grad, m, v, grad_scale,
                        s.beta1(), s.beta2(), s.epsilon(), step_size,
                        inv_sqrt_bc2, s.weight_decay(), 0.0f);
    }
  }

 private:
  const bool decoupled_;
};

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("optimizer.", field, ": ", why));
}

std::string Num(float x) { return absl::StrFormat("%g", x); }

// Format of ExportState(): magic, format version, kind, slots, length, steps,
// then the slots' floats (little-endian), all integers little-endian.
constexpr char kStateMagic[4] = {'P', 'S', 'O', 'S'};
constexpr uint32_t kStateFormat = 1;
constexpr size_t kStateHeader = 4 + 4 + 4 + 4 + 8 + 8;

}  // namespace

void AddInto(absl::Span<float> acc, const float* x) {
  float* __restrict a = acc.data();
  const float* __restrict b = x;
  const size_t n = acc.size();
  for (size_t i = 0; i < n; ++i) a[i] += b[i];
}

void AddInto(absl::Span<float> acc, const BytePieces& x) {
  FloatBlockReader in(x);
  for (absl::Span<const float> b = in.Next(); !b.empty(); b = in.Next()) {
    AddInto(acc.subspan(in.first(), b.size()), b.data());
  }
}

namespace {

// The fields every kind shares: learning_rate and weight_decay.
absl::Status CheckShared(const OptimizerSpec& s) {
  if (!std::isfinite(s.learning_rate()) || !(s.learning_rate() > 0)) {
    return Bad("learning_rate", "must be > 0, got " + Num(s.learning_rate()));
  }
  if (!std::isfinite(s.weight_decay()) || s.weight_decay() < 0) {
    return Bad("weight_decay", "must be >= 0, got " + Num(s.weight_decay()));
  }
  return absl::OkStatus();
}

// Fields the kind would silently ignore are rejected: a config that sets
// them expects an effect it would not get. SGD's own fields are checked here
// too, since they are the ones the other kinds must leave unset.
absl::Status CheckFieldsOfOtherKinds(const OptimizerSpec& s) {
  const OptimizerKind kind = s.kind();
  const std::string kind_name = OptimizerKind_Name(kind);
  if (kind == SGD) {
    if (!std::isfinite(s.momentum()) || s.momentum() < 0 || s.momentum() >= 1) {
      return Bad("momentum", "must be in [0, 1), got " + Num(s.momentum()));
    }
    if (s.nesterov() && !(s.momentum() > 0)) {
      return Bad("nesterov", "needs momentum > 0");
    }
    if (s.has_epsilon()) return Bad("epsilon", "SGD has no epsilon");
  } else {
    if (s.momentum() != 0) {
      return Bad("momentum", "only SGD uses momentum, kind is " + kind_name);
    }
    if (s.nesterov()) {
      return Bad("nesterov", "only SGD uses nesterov, kind is " + kind_name);
    }
  }
  if (kind != ADAM && kind != ADAMW) {
    if (s.has_beta1()) {
      return Bad("beta1",
                 "only ADAM and ADAMW use beta1, kind is " + kind_name);
    }
    if (s.has_beta2()) {
      return Bad("beta2",
                 "only ADAM and ADAMW use beta2, kind is " + kind_name);
    }
  }
  if (kind != ADAGRAD && s.initial_accumulator() != 0) {
    return Bad("initial_accumulator",
               "only ADAGRAD uses initial_accumulator, kind is " + kind_name);
  }
  return absl::OkStatus();
}

// ADAM/ADAMW: fills beta1, beta2 and epsilon and checks them.
absl::Status FillAndCheckAdam(OptimizerSpec* s) {
  if (!s->has_beta1()) s->set_beta1(kDefaultAdamBeta1);
  if (!s->has_beta2()) s->set_beta2(kDefaultAdamBeta2);
  if (!s->has_epsilon()) s->set_epsilon(kDefaultAdamEpsilon);
  for (const auto& [name, b] : {std::make_pair("beta1", s->beta1()),
                                std::make_pair("beta2", s->beta2())}) {
    if (!std::isfinite(b) || b < 0 || b >= 1) {
      return Bad(name, "must be in [0, 1), got " + Num(b));
    }
  }
  if (s->kind() == ADAMW &&
      static_cast<double>(s->learning_rate()) * s->weight_decay() >= 1.0) {
    return Bad("weight_decay",
               absl::StrCat("learning_rate * weight_decay must be < 1 for "
                            "ADAMW (it scales the parameters by 1 - lr * "
                            "wd), got ",
                            Num(s->learning_rate() * s->weight_decay())));
  }
  return absl::OkStatus();
}

// ADAGRAD: fills epsilon and checks initial_accumulator.
absl::Status FillAndCheckAdagrad(OptimizerSpec* s) {
  if (!s->has_epsilon()) s->set_epsilon(kDefaultAdagradEpsilon);
  if (!std::isfinite(s->initial_accumulator()) ||
      s->initial_accumulator() < 0) {
    return Bad("initial_accumulator",
               "must be >= 0, got " + Num(s->initial_accumulator()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(
    const OptimizerSpec& spec) {
  OptimizerSpec s = spec;
  const OptimizerKind kind = s.kind();
  if (kind != SGD && kind != ADAGRAD && kind != ADAM && kind != ADAMW) {
    return Bad("kind", absl::StrCat("must be SGD, ADAGRAD, ADAM or ADAMW, got ",
                                    OptimizerKind_Name(kind).empty()
                                        ? absl::StrCat(static_cast<int>(kind))
                                        : OptimizerKind_Name(kind)));
  }
  PS_RETURN_IF_ERROR(CheckShared(s));
  PS_RETURN_IF_ERROR(CheckFieldsOfOtherKinds(s));
  if (kind == ADAM || kind == ADAMW) PS_RETURN_IF_ERROR(FillAndCheckAdam(&s));
  if (kind == ADAGRAD) PS_RETURN_IF_ERROR(FillAndCheckAdagrad(&s));
  if (s.has_epsilon() && (!std::isfinite(s.epsilon()) || !(s.epsilon() > 0))) {
    return Bad("epsilon", "must be > 0, got " + Num(s.epsilon()));
  }
  switch (kind) {
    case SGD:
      return std::unique_ptr<Optimizer>(new Sgd(s));
    case ADAGRAD:
      return std::unique_ptr<Optimizer>(new Adagrad(s));
    case ADAM:
      return std::unique_ptr<Optimizer>(new Adam(s, /*decoupled=*/false));
    default:
      return std::unique_ptr<Optimizer>(new Adam(s, /*decoupled=*/true));
  }
}

void Optimizer::Apply(absl::Span<float> params, const float* grad,
                      float grad_scale, OptimizerState* state) const {
  ScopedFlushDenormals flush;
  Update(params, grad, grad_scale, state);
}

OptimizerState Optimizer::NewState(size_t length) const {
  OptimizerState state;
  state.slots.resize(num_slots_);
  for (int i = 0; i < num_slots_; ++i) {
    const float init =
        spec_.kind() == ADAGRAD ? spec_.initial_accumulator() : 0;
    state.slots[i].assign(length, init);
  }
  return state;
}

uint64_t Optimizer::StateBytes(uint64_t length) const {
  return static_cast<uint64_t>(num_slots_) * length * sizeof(float) +
         sizeof(OptimizerState);
}

std::string Optimizer::ExportState(const OptimizerState& state) const {
  const size_t length = state.slots.empty() ? 0 : state.slots[0].size();
  std::string out;
  out.reserve(kStateHeader + state.slots.size() * length * 4);
  out.append(kStateMagic, sizeof(kStateMagic));
  PutLe(kStateFormat, 4, &out);
  PutLe(static_cast<uint32_t>(spec_.kind()), 4, &out);
  PutLe(state.slots.size(), 4, &out);
  PutLe(length, 8, &out);
  PutLe(state.steps, 8, &out);
  std::string slot_bytes;
  for (const std::vector<float>& slot : state.slots) {
    EncodeFloats(slot, &slot_bytes);
    out += slot_bytes;
  }
  return out;
}

absl::Status Optimizer::ImportState(absl::string_view bytes, size_t length,
                                    OptimizerState* state) const {
  auto bad = [](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer state: ", why));
  };
  if (bytes.size() < kStateHeader) {
    return bad(absl::StrCat(bytes.size(), " bytes, shorter than the ",
                            kStateHeader, "-byte header"));
  }
  if (std::memcmp(bytes.data(), kStateMagic, sizeof(kStateMagic)) != 0) {
    return bad("bad magic (not an exported optimizer state)");
  }
  const char* p = bytes.data() + 4;
  const uint64_t format = GetLe(p, 4);
  const uint64_t kind = GetLe(p + 4, 4);
  const uint64_t slots = GetLe(p + 8, 4);
  const uint64_t len = GetLe(p + 12, 8);
  const uint64_t steps = GetLe(p + 20, 8);
  if (format != kStateFormat) {
    return bad(
        absl::StrCat("format version ", format, ", expected ", kStateFormat));
  }
  if (kind != static_cast<uint64_t>(spec_.kind())) {
    return bad(absl::StrCat("saved by optimizer kind ", kind, ", this is ",
                            OptimizerKind_Name(spec_.kind())));
  }
  if (slots != static_cast<uint64_t>(num_slots_)) {
    return bad(absl::StrCat(slots, " slots, this optimizer uses ", num_slots_));
  }
  if (slots > 0 && len != length) {
    return bad(
        absl::StrCat("saved for ", len, " floats, chunk holds ", length));
  }
  const uint64_t want = kStateHeader + slots * length * 4;
  if (bytes.size() != want) {
    return bad(absl::StrCat(bytes.size(), " bytes, expected ", want));
  }
  OptimizerState parsed;
  parsed.steps = steps;
  parsed.slots.resize(slots);
  const char* data = bytes.data() + kStateHeader;
  for (uint64_t i = 0; i < slots; ++i) {
    parsed.slots[i].resize(length);
    DecodeFloats(absl::string_view(data + i * length * 4, length * 4),
                 absl::MakeSpan(parsed.slots[i]));
  }
  *state = std::move(parsed);
  return absl::OkStatus();
}

#if defined(__SSE__)
// MXCSR bits: flush-to-zero (results) and denormals-are-zero (inputs).
constexpr unsigned int kFlushToZero = 0x8000;
constexpr unsigned int kDenormalsAreZero = 0x0040;

ScopedFlushDenormals::ScopedFlushDenormals() : saved_(_mm_getcsr()) {
  _mm_setcsr(saved_ | kFlushToZero | kDenormalsAreZero);
}

ScopedFlushDenormals::~ScopedFlushDenormals() { _mm_setcsr(saved_); }
#else
ScopedFlushDenormals::ScopedFlushDenormals() = default;
ScopedFlushDenormals::~ScopedFlushDenormals() = default;
#endif

}  // namespace ps
