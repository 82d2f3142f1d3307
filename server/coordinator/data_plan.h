// The data plan of an elastic data job (JobSpec.data_rescale, DataPlan in
// proto/coordinator.proto): which examples each step reads on each worker,
// sealed step by step as the job's workers reach it, so that every worker
// reads each step the same way whatever the timing of a scale.
//
//   GetDataPlanResponse answer;
//   PS_ASSIGN_OR_RETURN(PlanAnswer a, AnswerDataPlan(plan, spec, step, n,
//                                                    caller_rank, members,
//                                                    &answer));
//   if (a == PlanAnswer::kNotYet) ... UNAVAILABLE: ask again
//   if (a == PlanAnswer::kSealed) ... the quorum follows the new segment
//
// Sealing: step `plan.planned_until()` is planned when a worker of the last
// segment asks for it, i.e. when it has finished the step before; under
// BSP no worker has pushed that step yet (each needs its plan first), so
// the quorum can change there exactly. A worker outside the last segment
// (a joiner) waits for it. A new segment starts at an epoch boundary, and
// under DATA_RESCALE_AT_ONCE also at any step where `members` differ from
// the last segment's ranks: the examples of the epoch not read yet are
// split over the new ranks.
//
// Free functions over protos; the caller serializes calls per plan.
#ifndef SERVER_COORDINATOR_DATA_PLAN_H_
#define SERVER_COORDINATOR_DATA_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"

namespace ps {

// Whether a job splits its data over its active workers: max_workers set
// and a model trained on a data set by the workers (mlp, cnn, and a ctr
// model on ctr-synthetic).
bool UsesElasticData(const JobSpec& spec);

// The first step after `segment`'s epoch: the epoch's examples from the
// segment's offset, in whole steps of ranks x batch_size.
uint64_t EpochEndStep(const DataSegment& segment, uint64_t train_examples,
                      uint32_t batch_size);

enum class PlanAnswer {
  kAnswered,  // a planned step (or done)
  kSealed,    // sealed now: its segment is new (the quorum may change)
  kNotYet,    // not planned yet and the caller may not seal it
};

// Answers `step` into *response. `members`: the ranks that read data from
// a new segment on (ascending, non-empty). INVALID_ARGUMENT naming the
// field for train_examples 0 or a step past the plan;
// FAILED_PRECONDITION for a training set of another size than the plan's
// or one too small for a step of `members`.
absl::StatusOr<PlanAnswer> AnswerDataPlan(DataPlan& plan, const JobSpec& spec,
                                          uint64_t step,
                                          uint64_t train_examples,
                                          uint32_t caller_rank,
                                          const std::vector<uint32_t>& members,
                                          GetDataPlanResponse* response);

}  // namespace ps

#endif  // SERVER_COORDINATOR_DATA_PLAN_H_
