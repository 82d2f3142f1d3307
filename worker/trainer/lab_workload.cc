#include "worker/trainer/lab_workload.h"

#include <algorithm>

#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "core/model_spec.h"

namespace ps {

float LabGradient(uint32_t rank) {
  return static_cast<float>(rank + 1) / 1024.0f;
}

absl::StatusOr<std::unique_ptr<LabWorkload>> LabWorkload::Create(
    const ModelSpec& spec, uint32_t rank) {
  if (!spec.has_lab()) {
    return absl::InvalidArgumentError("model.lab: the job has no lab model");
  }
  PS_RETURN_IF_ERROR(ValidateModelSpec(spec));
  const LabModel& lab = spec.lab();
  return std::unique_ptr<LabWorkload>(
      new LabWorkload(NumParameters(ModelTensors(spec)), lab.steps_per_epoch(),
                      absl::Milliseconds(lab.compute_ms()), rank));
}

void LabWorkload::FillGradient(absl::Span<float> grad) const {
  std::fill(grad.begin(), grad.end(), LabGradient(rank_));
}

void LabWorkload::Compute() const {
  // A sleep, not a spin: the lab measures the network, and the workers of
  // one machine must not take each other's cores.
  if (compute_ > absl::ZeroDuration()) absl::SleepFor(compute_);
}

void LabWorkload::Compute(double fraction) const {
  const absl::Duration d = compute_ * fraction;
  if (d > absl::ZeroDuration()) absl::SleepFor(d);
}

}  // namespace ps
