#include "worker/trainer/exchange_pipeline.h"

#include <algorithm>
#include <utility>

namespace ps {

ExchangePipeline::ExchangePipeline(ParameterClient* client,
                                   std::vector<Layer> layers, Options options,
                                   absl::Span<const float> gradient,
                                   absl::Span<float> params)
    : client_(client),
      layers_(std::move(layers)),
      options_(options),
      gradient_(gradient),
      params_(params) {
  absl::MutexLock lock(&mu_);
  in_.assign(layers_.size(), true);
  status_.assign(layers_.size(), absl::OkStatus());
}

ExchangePipeline::~ExchangePipeline() { AwaitAll().IgnoreError(); }

uint64_t ExchangePipeline::exchanges_started() const {
  absl::MutexLock lock(&mu_);
  return started_;
}

void ExchangePipeline::LayerReady(uint64_t step, size_t layer) {
  absl::MutexLock lock(&mu_);
  in_[layer] = false;
  held_.push_back(layer);
  held_bytes_ += layers_[layer].bytes;
  const bool last_allowed =
      options_.max_exchanges_per_step > 0 &&
      started_this_step_ + 1 >= options_.max_exchanges_per_step;
  if (held_bytes_ >= options_.fusion_bytes && !last_allowed) StartHeld(step);
}

void ExchangePipeline::Flush(uint64_t step) {
  absl::MutexLock lock(&mu_);
  if (!held_.empty()) StartHeld(step);
  started_this_step_ = 0;
}

void ExchangePipeline::Discard(absl::Status why) {
  absl::MutexLock lock(&mu_);
  for (size_t l : held_) {
    in_[l] = true;
    status_[l] = why;
  }
  held_.clear();
  held_bytes_ = 0;
  started_this_step_ = 0;
}

void ExchangePipeline::StartHeld(uint64_t step) {
  TensorExchange x;
  x.step = step;
  size_t first = layers_.size();
  for (size_t l : held_) {
    const Layer& layer = layers_[l];
    x.tensors.insert(x.tensors.end(), layer.tensors.begin(),
                     layer.tensors.end());
    first = std::min(first, l);
  }
  x.priority =
      options_.prioritize ? static_cast<int>(layers_.size() - first) : 0;
  x.gradient = gradient_;
  x.params = params_;
  std::vector<size_t> layers = std::move(held_);
  held_.clear();
  held_bytes_ = 0;
  x.done = [this, step, layers](const absl::Status& s) {
    Done(step, layers, s);
  };
  ++in_flight_;
  ++started_;
  ++started_this_step_;
  // The client may run `done` inside StartExchange, which takes mu_.
  mu_.Unlock();
  client_->StartExchange(std::move(x));
  mu_.Lock();
}

std::optional<uint64_t> ExchangePipeline::first_failed_step() const {
  absl::MutexLock lock(&mu_);
  return first_failed_step_;
}

void ExchangePipeline::Done(uint64_t step, const std::vector<size_t>& layers,
                            const absl::Status& s) {
  absl::MutexLock lock(&mu_);
  for (size_t l : layers) {
    in_[l] = true;
    status_[l] = s;
  }
  if (!s.ok() && first_error_.ok()) first_error_ = s;
  if (!s.ok()) {
    first_failed_step_ = std::min(first_failed_step_.value_or(step), step);
  }
  --in_flight_;
}

absl::Status ExchangePipeline::AwaitLayer(size_t layer) {
  absl::MutexLock lock(&mu_);
  auto in = [this, layer]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return static_cast<bool>(in_[layer]);
  };
  mu_.Await(absl::Condition(&in));
  return status_[layer];
}

absl::Status ExchangePipeline::AwaitAll() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return in_flight_ == 0;
  };
  mu_.Await(absl::Condition(&idle));
  return std::exchange(first_error_, absl::OkStatus());
}

}  // namespace ps
