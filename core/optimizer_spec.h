// The checks on an OptimizerSpec, shared by the job's dense optimizer
// (JobSpec.optimizer: SGD, ADAGRAD, ADAM, ADAMW) and each sparse table's
// (TableSpec.optimizer: SGD, ADAGRAD, ADAM, FTRL), so both name their fields
// the same way and reject the same mistakes.
//
//   std::vector<std::string> problems;
//   AppendOptimizerProblems(spec.optimizer(), "optimizer",
//                           {SGD, ADAGRAD, ADAM, ADAMW}, &problems);
//   // "optimizer.momentum: must be in [0, 1), got 1.5"
#ifndef CORE_OPTIMIZER_SPEC_H_
#define CORE_OPTIMIZER_SPEC_H_

#include <initializer_list>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "proto/job.pb.h"

namespace ps {

// Appends one "prefix.field: reason" per problem in `o` to `problems`: a
// kind that is unset, unknown or not in `allowed`; a learning rate that is
// not finite and > 0; a field out of range; a field set that `o.kind` does
// not read (momentum without SGD, l1 without FTRL, ...).
void AppendOptimizerProblems(const OptimizerSpec& o, absl::string_view prefix,
                             std::initializer_list<OptimizerKind> allowed,
                             std::vector<std::string>* problems);

// `o` with the documented defaults of its kind filled in: Adam/AdamW beta1,
// beta2, epsilon; Adagrad epsilon; FTRL ftrl_beta.
void ApplyOptimizerDefaults(OptimizerSpec* o);

}  // namespace ps

#endif  // CORE_OPTIMIZER_SPEC_H_
