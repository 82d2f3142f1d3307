#include "worker/data/loader.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"

namespace ps {

absl::StatusOr<std::unique_ptr<BatchLoader>> BatchLoader::Create(
    std::shared_ptr<const Dataset> train, ShardPlan plan, uint64_t start_step,
    uint64_t end_step, Options options) {
  if (train == nullptr) {
    return absl::InvalidArgumentError("train: null dataset");
  }
  if (options.num_threads == 0) {
    return absl::InvalidArgumentError("num_threads: must be >= 1");
  }
  if (options.prefetch == 0) {
    return absl::InvalidArgumentError("prefetch: must be >= 1");
  }
  if (start_step > end_step) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "start_step: %d is past end_step %d", start_step, end_step));
  }
  for (uint32_t i : plan.share()) {
    if (i >= train->size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "plan: example %d is outside the %d-example training set", i,
          train->size()));
    }
  }
  return std::unique_ptr<BatchLoader>(
      new BatchLoader(std::move(train), std::move(plan), start_step, end_step,
                      std::move(options)));
}

BatchLoader::BatchLoader(std::shared_ptr<const Dataset> train, ShardPlan plan,
                         uint64_t start_step, uint64_t end_step,
                         Options options)
    : train_(std::move(train)),
      plan_(std::move(plan)),
      end_step_(end_step),
      options_(std::move(options)),
      next_claim_(start_step),
      next_pop_(start_step),
      slots_(options_.prefetch) {
  // prefetch in slots plus the one the consumer holds.
  free_.reserve(options_.prefetch + 1);
  threads_.reserve(options_.num_threads);
  for (size_t i = 0; i < options_.num_threads; ++i) {
    threads_.emplace_back([this] { ThreadMain(); });
  }
}

BatchLoader::~BatchLoader() {
  Close();
  for (std::thread& t : threads_) t.join();
}

void BatchLoader::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

bool BatchLoader::ShouldWakeProducerLocked() const {
  // Past end_step_ the thread wakes to exit.
  return closed_ || next_claim_ >= end_step_ ||
         next_claim_ < next_pop_ + options_.prefetch;
}

std::unique_ptr<Batch> BatchLoader::TakeBufferLocked() {
  if (!free_.empty()) {
    std::unique_ptr<Batch> b = std::move(free_.back());
    free_.pop_back();
    return b;
  }
  ++stats_.buffers;
  auto b = std::make_unique<Batch>();
  const size_t n = plan_.batch_size();
  b->size = n;
  b->x.resize(n * train_->dim());
  b->labels.resize(n);
  b->indices.resize(n);
  return b;
}

std::shared_ptr<const std::vector<uint32_t>> BatchLoader::OrderLocked(
    uint64_t epoch) {
  // Epochs the consumer has left behind are no longer needed.
  const uint64_t oldest = next_pop_ / plan_.steps_per_epoch();
  while (!orders_.empty() && orders_.begin()->first < oldest) {
    orders_.erase(orders_.begin());
  }
  auto it = orders_.find(epoch);
  if (it != orders_.end()) return it->second;
  // Computed under the lock (a shuffle of the share, ~1 ms for 60k examples,
  // once per epoch) so each epoch is shuffled exactly once.
  auto order = std::make_shared<std::vector<uint32_t>>();
  plan_.EpochOrder(epoch, order.get());
  orders_.emplace(epoch, order);
  return order;
}

void BatchLoader::ThreadMain() {
  const size_t batch = plan_.batch_size();
  const uint64_t spe = plan_.steps_per_epoch();
  for (;;) {
    uint64_t step;
    std::unique_ptr<Batch> b;
    std::shared_ptr<const std::vector<uint32_t>> order;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &BatchLoader::ShouldWakeProducerLocked));
      if (closed_ || next_claim_ >= end_step_) return;
      step = next_claim_++;
      b = TakeBufferLocked();
      order = OrderLocked(step / spe);
    }
    if (options_.before_fill) options_.before_fill(step);
    b->step = step;
    b->epoch = step / spe;
    const uint32_t* first = order->data() + (step % spe) * batch;
    std::copy(first, first + batch, b->indices.begin());
    train_->Gather(absl::MakeConstSpan(b->indices), b->x.data(),
                   b->labels.data());
    {
      absl::MutexLock lock(&mu_);
      slots_[step % options_.prefetch] = std::move(b);
      ++stats_.filled;
    }
  }
}

absl::StatusOr<std::unique_ptr<Batch>> BatchLoader::Pop(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  if (next_pop_ >= end_step_) {
    return absl::OutOfRangeError(
        absl::StrCat("every step up to ", end_step_, " was loaded"));
  }
  std::unique_ptr<Batch>* slot = &slots_[next_pop_ % options_.prefetch];
  struct Ready {
    const bool* closed;
    const std::unique_ptr<Batch>* slot;
    bool operator()() const { return *closed || *slot != nullptr; }
  } ready{&closed_, slot};
  if (!ready()) ++stats_.starved;
  if (!mu_.AwaitWithDeadline(absl::Condition(&ready), deadline)) {
    return absl::DeadlineExceededError(
        absl::StrCat("batch of step ", next_pop_, " not loaded in time"));
  }
  if (closed_) return absl::CancelledError("batch loader closed");
  ++next_pop_;
  ++stats_.popped;
  return std::move(*slot);
}

void BatchLoader::Recycle(std::unique_ptr<Batch> batch) {
  if (batch == nullptr) return;
  absl::MutexLock lock(&mu_);
  free_.push_back(std::move(batch));
}

BatchLoader::Stats BatchLoader::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace ps
