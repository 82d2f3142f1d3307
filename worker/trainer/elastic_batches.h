// ElasticBatches: a worker's batches in an elastic data job (Assignment.
// elastic_data): the plan of each step comes from the coordinator
// (GetDataPlan, asked when the trainer reaches a step outside the segment
// it holds) and the examples from ElasticSampler (worker/data/
// elastic_sampler.h).
//
//   ElasticBatches batches(train, *std::move(sampler), rank, epochs, ask);
//   PS_ASSIGN_OR_RETURN(ElasticBatches::Next next, batches.Prepare(t));
//   if (next == ElasticBatches::Next::kDone) ...     // the job is over at t
//   if (next == ElasticBatches::Next::kLeave) ...    // not a reader from t
//   PS_ASSIGN_OR_RETURN(std::unique_ptr<Batch> b, batches.Fill(t));
//
// Batches are gathered on the caller's thread when asked (no prefetch: a
// step's examples are known only once its plan is). Under
// DATA_RESCALE_AT_ONCE every step is its own plan (one coordinator call per
// step); under DATA_RESCALE_EPOCH one call per epoch.
//
// Thread-compatible: the trainer's thread uses it alone.
#ifndef WORKER_TRAINER_ELASTIC_BATCHES_H_
#define WORKER_TRAINER_ELASTIC_BATCHES_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/coordinator.pb.h"
#include "worker/data/dataset.h"
#include "worker/data/elastic_sampler.h"
#include "worker/data/loader.h"

namespace ps {

class ElasticBatches {
 public:
  // The plan of `step` for a worker that loaded `train_examples`; blocks
  // (bounded by the callee's deadline) while the step is not planned yet.
  using AskPlan = std::function<absl::StatusOr<GetDataPlanResponse>(
      uint64_t step, uint64_t train_examples)>;

  enum class Next { kRun, kDone, kLeave };

  // `train` is shared; `epochs` = data.epochs (for the estimates). A null
  // `train` is for a caller that reads the examples itself (the ctr
  // trainer's generator): it calls StepIndices, never Fill.
  ElasticBatches(std::shared_ptr<const Dataset> train, ElasticSampler sampler,
                 uint32_t rank, uint32_t epochs, AskPlan ask);

  // Before step `step`: its plan (asked unless the segment held covers it).
  // kRun: Fill(step) may follow; kDone: the job's epochs are over at `step`;
  // kLeave: this rank reads no data from `step` on (scaled down). The
  // plan's errors as the callee reports them.
  absl::StatusOr<Next> Prepare(uint64_t step);
  // Whether Prepare(step) asks the coordinator (the step is outside the
  // segment held).
  bool NeedsPlan(uint64_t step) const;

  // The batch of a prepared step. Reuses a recycled batch's buffers.
  // kFailedPrecondition without a training set.
  absl::StatusOr<std::unique_ptr<Batch>> Fill(uint64_t step);
  // The training-set indices of a prepared step's examples for this rank.
  absl::Status StepIndices(uint64_t step, std::vector<uint32_t>* indices);
  void Recycle(std::unique_ptr<Batch> batch);

  // After a kRun Prepare: the job's steps as estimated now (the rest of the
  // epoch, then whole epochs at the current workers), the epoch and the
  // workers reading it.
  uint64_t EstimatedTotalSteps() const;
  uint32_t epoch() const { return static_cast<uint32_t>(segment_.epoch()); }
  uint32_t workers() const {
    return static_cast<uint32_t>(segment_.ranks_size());
  }

 private:
  const std::shared_ptr<const Dataset> train_;
  ElasticSampler sampler_;
  const uint32_t rank_;
  const uint32_t epochs_;
  const AskPlan ask_;
  // The segment held and the steps it holds for: [start_step, until_).
  DataSegment segment_;
  uint64_t until_ = 0;
  std::vector<uint32_t> indices_;
  std::unique_ptr<Batch> spare_;
};

}  // namespace ps

#endif  // WORKER_TRAINER_ELASTIC_BATCHES_H_
