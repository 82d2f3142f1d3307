#include "worker/trainer/evaluator.h"

#include <algorithm>

#include "common/status_macros.h"

namespace ps {

Evaluator::Evaluator(const Dataset* test, DeviceGroup* devices,
                     size_t eval_batch, uint64_t eval_every)
    : test_(test), devices_(devices), eval_every_(eval_every) {
  const size_t chunk = std::min(eval_batch, test_->size());
  x_.resize(chunk * test_->dim());
  labels_.resize(chunk);
}

absl::StatusOr<float> Evaluator::Accuracy(const float* params) {
  size_t correct = 0;
  for (size_t begin = 0; begin < test_->size(); begin += labels_.size()) {
    const size_t n = std::min(labels_.size(), test_->size() - begin);
    test_->CopyRange(begin, n, x_.data(), labels_.data());
    double loss = 0.0;
    size_t c = 0;
    PS_RETURN_IF_ERROR(
        devices_->Evaluate(params, x_.data(), labels_.data(), n, &loss, &c));
    correct += c;
  }
  return test_->size() == 0
             ? 0.0f
             : static_cast<float>(correct) / static_cast<float>(test_->size());
}

}  // namespace ps
