#include "worker/trainer/elastic_batches.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "common/status_macros.h"

namespace ps {

ElasticBatches::ElasticBatches(std::shared_ptr<const Dataset> train,
                               ElasticSampler sampler, uint32_t rank,
                               uint32_t epochs, AskPlan ask)
    : train_(std::move(train)),
      sampler_(std::move(sampler)),
      rank_(rank),
      epochs_(epochs),
      ask_(std::move(ask)) {}

bool ElasticBatches::NeedsPlan(uint64_t step) const {
  return step < segment_.start_step() || step >= until_ ||
         segment_.ranks().empty();
}

absl::StatusOr<ElasticBatches::Next> ElasticBatches::Prepare(uint64_t step) {
  if (NeedsPlan(step)) {
    PS_ASSIGN_OR_RETURN(GetDataPlanResponse plan,
                        ask_(step, sampler_.dataset_size()));
    if (plan.done()) return Next::kDone;
    if (plan.segment().start_step() > step || plan.planned_until() <= step) {
      return absl::InternalError(absl::StrFormat(
          "data plan: the segment [%d, %d) answered for step %d does not "
          "hold it",
          plan.segment().start_step(), plan.planned_until(), step));
    }
    segment_ = plan.segment();
    until_ = plan.planned_until();
  }
  const auto& ranks = segment_.ranks();
  if (std::find(ranks.begin(), ranks.end(), rank_) == ranks.end()) {
    return Next::kLeave;
  }
  return Next::kRun;
}

absl::Status ElasticBatches::StepIndices(uint64_t step,
                                         std::vector<uint32_t>* indices) {
  return sampler_.StepIndices(segment_, step, rank_, indices);
}

absl::StatusOr<std::unique_ptr<Batch>> ElasticBatches::Fill(uint64_t step) {
  if (train_ == nullptr) {
    return absl::FailedPreconditionError("elastic batches: no training set");
  }
  PS_RETURN_IF_ERROR(StepIndices(step, &indices_));
  std::unique_ptr<Batch> b = std::move(spare_);
  if (b == nullptr) {
    b = std::make_unique<Batch>();
    const size_t n = sampler_.batch_size();
    b->size = n;
    b->x.resize(n * train_->dim());
    b->labels.resize(n);
  }
  b->step = step;
  b->epoch = segment_.epoch();
  b->indices = indices_;
  train_->Gather(absl::MakeConstSpan(indices_), b->x.data(), b->labels.data());
  return b;
}

void ElasticBatches::Recycle(std::unique_ptr<Batch> batch) {
  if (batch != nullptr) spare_ = std::move(batch);
}

uint64_t ElasticBatches::EstimatedTotalSteps() const {
  const uint64_t n = sampler_.dataset_size();
  const uint64_t room =
      static_cast<uint64_t>(segment_.ranks_size()) * sampler_.batch_size();
  if (room == 0 || segment_.offset() > n) return segment_.start_step();
  const uint64_t epoch_end =
      segment_.start_step() + (n - segment_.offset()) / room;
  const uint64_t later =
      epochs_ > segment_.epoch() + 1 ? epochs_ - segment_.epoch() - 1 : 0;
  return epoch_end + later * (n / room);
}

}  // namespace ps
