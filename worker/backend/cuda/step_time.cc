#include "worker/backend/cuda/step_time.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "common/status_macros.h"
#include "core/model_spec.h"
#include "worker/model/model.h"
#include "worker/model/testing/model_test_util.h"

namespace ps {
namespace {

// Median milliseconds of kStepTrials calls of `step`, after kStepWarmups.
absl::StatusOr<double> MedianMs(const std::function<absl::Status()>& step) {
  for (int i = 0; i < kStepWarmups; ++i) PS_RETURN_IF_ERROR(step());
  std::vector<double> ms;
  for (int i = 0; i < kStepTrials; ++i) {
    const auto start = std::chrono::steady_clock::now();
    PS_RETURN_IF_ERROR(step());
    ms.push_back(std::chrono::duration<double, std::milli>(
                     std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

absl::StatusOr<StepTime> TimeModel(const char* name, const ModelSpec& spec,
                                   Backend* gpu) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Model> m,
                      Model::Create(spec, gpu, kStepBatch));
  const std::vector<float> params = InitParameters(m->tensors(), 31);
  const LabeledData d =
      LinearlySeparable(kStepBatch, m->input_dim(), m->num_classes(), 32);
  std::vector<float> grad(m->num_parameters());
  double loss = 0;
  size_t correct = 0;
  StepTime t{name, m->num_parameters()};
  PS_ASSIGN_OR_RETURN(t.host_io_ms, MedianMs([&] {
                        return m->ComputeGradient(params.data(), d.x.data(),
                                                  d.labels.data(), d.n,
                                                  grad.data(), &loss, &correct);
                      }));
  std::vector<float> pinned_params = params;
  const size_t bytes = params.size() * sizeof(float);
  PS_RETURN_IF_ERROR(gpu->PinHost(pinned_params.data(), bytes));
  absl::Status pinned = gpu->PinHost(grad.data(), bytes);
  if (pinned.ok()) {
    absl::StatusOr<double> ms = MedianMs([&] {
      return m->ComputeGradient(pinned_params.data(), d.x.data(),
                                d.labels.data(), d.n, grad.data(), &loss,
                                &correct);
    });
    pinned = ms.status();
    if (ms.ok()) t.pinned_io_ms = *ms;
    gpu->UnpinHost(grad.data());
  }
  gpu->UnpinHost(pinned_params.data());
  PS_RETURN_IF_ERROR(pinned);
  PS_RETURN_IF_ERROR(m->SetParameters(params.data()));
  PS_ASSIGN_OR_RETURN(t.resident_ms, MedianMs([&] {
                        return m->ComputeDeviceGradient(nullptr, d.x.data(),
                                                        d.labels.data(), d.n,
                                                        &loss, &correct);
                      }));
  return t;
}

}  // namespace

absl::StatusOr<std::vector<StepTime>> TimeModelSteps(Backend* gpu) {
  std::vector<StepTime> out;
  PS_ASSIGN_OR_RETURN(StepTime mlp, TimeModel("mlp", FashionMlpSpec(), gpu));
  out.push_back(mlp);
  PS_ASSIGN_OR_RETURN(StepTime cnn, TimeModel("cnn", FashionCnnSpec(), gpu));
  out.push_back(cnn);
  return out;
}

}  // namespace ps
