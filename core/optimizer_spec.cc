#include "core/optimizer_spec.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/defaults.h"

namespace ps {
namespace {

// "field: reason" lines under one prefix.
class Problems {
 public:
  Problems(absl::string_view prefix, std::vector<std::string>* out)
      : prefix_(prefix), out_(out) {}
  void Add(absl::string_view field, absl::string_view reason) {
    out_->push_back(absl::StrCat(prefix_, ".", field, ": ", reason));
  }

 private:
  absl::string_view prefix_;
  std::vector<std::string>* out_;
};

bool Finite(float v) { return std::isfinite(v); }

// Whether `kind` names a known optimizer other than `uses` (and so should
// not set a field only `uses` reads).
bool OtherKnownKind(OptimizerKind kind,
                    std::initializer_list<OptimizerKind> uses) {
  if (!OptimizerKind_IsValid(kind) || kind == OPTIMIZER_UNSPECIFIED) {
    return false;
  }
  for (OptimizerKind u : uses) {
    if (kind == u) return false;
  }
  return true;
}

// "only SGD uses momentum (kind is ADAM)".
std::string OnlyFor(absl::string_view who, absl::string_view field,
                    OptimizerKind kind) {
  return absl::StrCat("only ", who, " uses ", field, " (kind is ",
                      OptimizerKind_Name(kind), ")");
}

// momentum and nesterov: SGD's fields.
void CheckSgdFields(const OptimizerSpec& o, Problems& p) {
  const OptimizerKind kind = o.kind();
  if (!(o.momentum() >= 0 && o.momentum() < 1)) {
    p.Add("momentum",
          absl::StrFormat("must be in [0, 1), got %g", o.momentum()));
  } else if (o.momentum() > 0 && OtherKnownKind(kind, {SGD})) {
    p.Add("momentum", OnlyFor("SGD", "momentum", kind));
  }
  if (o.nesterov()) {
    if (OtherKnownKind(kind, {SGD})) {
      p.Add("nesterov", OnlyFor("SGD", "nesterov", kind));
    } else if (!(o.momentum() > 0)) {
      p.Add("nesterov", "requires momentum > 0");
    }
  }
}

// beta1, beta2, epsilon and initial_accumulator: the adaptive optimizers'.
void CheckAdaptiveFields(const OptimizerSpec& o, Problems& p) {
  const OptimizerKind kind = o.kind();
  auto check_beta = [&](absl::string_view field, bool has, float v) {
    if (!has) return;
    if (!(v >= 0 && v < 1)) {
      p.Add(field, absl::StrFormat("must be in [0, 1), got %g", v));
    } else if (OtherKnownKind(kind, {ADAM, ADAMW})) {
      p.Add(field, absl::StrCat("only ADAM and ADAMW use it (kind is ",
                                OptimizerKind_Name(kind), ")"));
    }
  };
  check_beta("beta1", o.has_beta1(), o.beta1());
  check_beta("beta2", o.has_beta2(), o.beta2());
  if (o.has_epsilon()) {
    if (!(o.epsilon() > 0) || !Finite(o.epsilon())) {
      p.Add("epsilon",
            absl::StrFormat("must be finite and > 0, got %g", o.epsilon()));
    } else if (OtherKnownKind(kind, {ADAGRAD, ADAM, ADAMW})) {
      p.Add("epsilon",
            absl::StrCat(OptimizerKind_Name(kind), " does not use epsilon"));
    }
  }
  if (!(o.initial_accumulator() >= 0) || !Finite(o.initial_accumulator())) {
    p.Add("initial_accumulator",
          absl::StrFormat("must be finite and >= 0, got %g",
                          o.initial_accumulator()));
  } else if (o.initial_accumulator() > 0 && OtherKnownKind(kind, {ADAGRAD})) {
    p.Add("initial_accumulator",
          OnlyFor("ADAGRAD", "initial_accumulator", kind));
  }
}

// l1, l2 and ftrl_beta: FTRL's.
void CheckFtrlFields(const OptimizerSpec& o, Problems& p) {
  const OptimizerKind kind = o.kind();
  auto check = [&](absl::string_view field, bool set, float v) {
    if (!(v >= 0) || !Finite(v)) {
      p.Add(field, absl::StrFormat("must be finite and >= 0, got %g", v));
    } else if (set && OtherKnownKind(kind, {FTRL})) {
      p.Add(field, OnlyFor("FTRL", field, kind));
    }
  };
  check("l1", o.l1() != 0, o.l1());
  check("l2", o.l2() != 0, o.l2());
  if (o.has_ftrl_beta()) check("ftrl_beta", true, o.ftrl_beta());
}

}  // namespace

void AppendOptimizerProblems(const OptimizerSpec& o, absl::string_view prefix,
                             std::initializer_list<OptimizerKind> allowed,
                             std::vector<std::string>* problems) {
  Problems p(prefix, problems);
  const OptimizerKind kind = o.kind();
  std::vector<std::string> names;
  bool allowed_kind = false;
  for (OptimizerKind k : allowed) {
    names.push_back(OptimizerKind_Name(k));
    allowed_kind = allowed_kind || k == kind;
  }
  const std::string list = absl::StrJoin(names, ", ");
  if (kind == OPTIMIZER_UNSPECIFIED) {
    p.Add("kind", absl::StrCat("must be set (", list, ")"));
  } else if (!OptimizerKind_IsValid(kind)) {
    p.Add("kind", absl::StrFormat("unknown value %d", kind));
  } else if (!allowed_kind) {
    p.Add("kind", absl::StrCat(OptimizerKind_Name(kind),
                               " is not available here (", list, ")"));
  }
  if (!(o.learning_rate() > 0) || !Finite(o.learning_rate())) {
    p.Add("learning_rate",
          absl::StrFormat("must be finite and > 0, got %g", o.learning_rate()));
  }
  CheckSgdFields(o, p);
  if (!(o.weight_decay() >= 0) || !Finite(o.weight_decay())) {
    p.Add("weight_decay",
          absl::StrFormat("must be finite and >= 0, got %g", o.weight_decay()));
  }
  CheckAdaptiveFields(o, p);
  CheckFtrlFields(o, p);
}

void ApplyOptimizerDefaults(OptimizerSpec* o) {
  if (o->kind() == ADAM || o->kind() == ADAMW) {
    if (!o->has_beta1()) o->set_beta1(kDefaultAdamBeta1);
    if (!o->has_beta2()) o->set_beta2(kDefaultAdamBeta2);
    if (!o->has_epsilon()) o->set_epsilon(kDefaultAdamEpsilon);
  } else if (o->kind() == ADAGRAD) {
    if (!o->has_epsilon()) o->set_epsilon(kDefaultAdagradEpsilon);
  } else if (o->kind() == FTRL) {
    if (!o->has_ftrl_beta()) o->set_ftrl_beta(kDefaultFtrlBeta);
  }
}

}  // namespace ps
