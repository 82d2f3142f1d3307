// LabWorkload: the worker's side of the lab model (ModelSpec.lab, see
// proto/job.proto and core/model_spec.h), a communication-bound workload
// for the scaling lab. It has the tensors of a real model but no data and no
// arithmetic: a step "computes" by waiting compute_ms without using the CPU
// (eight workers on two cores must not contend), and its gradient is a
// constant, filled once:
//
//   absl::StatusOr<std::unique_ptr<LabWorkload>> lab =
//       LabWorkload::Create(job.model(), rank);
//   std::vector<float> grad((*lab)->num_parameters());
//   (*lab)->FillGradient(absl::MakeSpan(grad));   // once
//   for (t ...) { (*lab)->Compute(); client->PushPull(t, grad, params); }
//
// Every element of rank r's gradient is LabGradient(r) = (r + 1) / 1024, an
// exact binary fraction, so with SGD (momentum 0, no weight decay), BSP and W
// workers (W a power of two: the shards scale the sum by 1 / W) that all
// push every step, the shards' mean gradient is exactly (W + 1) / 2048, and
// after T steps every parameter is exactly -T * learning_rate * (W + 1) /
// 2048 (the tensors start at zero) while those values stay exact in float (a
// power-of-two learning rate, small T): tests/lab_job_test checks that.
//
// Thread-compatible; Compute blocks for compute_ms.
#ifndef WORKER_TRAINER_LAB_WORKLOAD_H_
#define WORKER_TRAINER_LAB_WORKLOAD_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/job.pb.h"

namespace ps {

// The value of every element of rank `rank`'s lab gradient: (rank + 1) / 1024.
float LabGradient(uint32_t rank);

class LabWorkload {
 public:
  // kInvalidArgument naming the field when `spec` is not a valid lab model.
  static absl::StatusOr<std::unique_ptr<LabWorkload>> Create(
      const ModelSpec& spec, uint32_t rank);

  // Floats in the model's flat layout (its tensors in ModelTensors order).
  size_t num_parameters() const { return num_parameters_; }
  uint64_t steps_per_epoch() const { return steps_per_epoch_; }
  absl::Duration compute_time() const { return compute_; }

  // Sets every element of `grad` to LabGradient(rank).
  void FillGradient(absl::Span<float> grad) const;

  // One step's compute: sleeps compute_time() (returns at once for 0).
  void Compute() const;
  // A share of it: sleeps fraction * compute_time() (the overlapped step
  // spreads a step's compute over its layers).
  void Compute(double fraction) const;

 private:
  LabWorkload(size_t num_parameters, uint64_t steps_per_epoch,
              absl::Duration compute, uint32_t rank)
      : num_parameters_(num_parameters),
        steps_per_epoch_(steps_per_epoch),
        compute_(compute),
        rank_(rank) {}

  const size_t num_parameters_;
  const uint64_t steps_per_epoch_;
  const absl::Duration compute_;
  const uint32_t rank_;
};

}  // namespace ps

#endif  // WORKER_TRAINER_LAB_WORKLOAD_H_
