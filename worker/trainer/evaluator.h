// Evaluator: test accuracy of a parameter vector over a whole test set, in
// chunks of at most eval_batch examples on device 0 of a DeviceGroup, with
// buffers allocated once (an evaluation allocates nothing).
//
//   Evaluator eval(&test, devices.get(), /*eval_batch=*/1000,
//                  /*eval_every=*/job.eval_every());
//   if (eval.Due(step_done, total_steps)) {
//     PS_ASSIGN_OR_RETURN(float accuracy, eval.Accuracy(params.data()));
//   }
//
// Thread-compatible: one thread at a time (and not while the DeviceGroup
// runs something else).
#ifndef WORKER_TRAINER_EVALUATOR_H_
#define WORKER_TRAINER_EVALUATOR_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/dataset.h"
#include "worker/trainer/device_group.h"

namespace ps {

class Evaluator {
 public:
  // `test` and `devices` are borrowed and must outlive the Evaluator;
  // `test` has the model's input dimension. eval_batch >= 1; eval_every 0
  // means only the final evaluation.
  Evaluator(const Dataset* test, DeviceGroup* devices, size_t eval_batch,
            uint64_t eval_every);

  // Whether to evaluate after `step_done` of `total_steps` steps: every
  // eval_every steps, except the last (the final evaluation follows it).
  bool Due(uint64_t step_done, uint64_t total_steps) const {
    return eval_every_ > 0 && step_done % eval_every_ == 0 &&
           step_done < total_steps;
  }

  // Correct predictions / test examples for `params` (num_parameters
  // floats); 0 for an empty test set. Blocks; errors as DeviceGroup's.
  absl::StatusOr<float> Accuracy(const float* params);

 private:
  const Dataset* const test_;   // borrowed
  DeviceGroup* const devices_;  // borrowed
  const uint64_t eval_every_;
  std::vector<float> x_;         // one chunk's features
  std::vector<int32_t> labels_;  // one chunk's labels
};

}  // namespace ps

#endif  // WORKER_TRAINER_EVALUATOR_H_
