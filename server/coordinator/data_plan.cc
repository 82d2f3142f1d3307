#include "server/coordinator/data_plan.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace ps {
namespace {

// The segment holding planned step `step` and the step it holds until.
void Answer(const DataPlan& plan, uint64_t step,
            GetDataPlanResponse* response) {
  const auto& segments = plan.segments();
  auto it = std::upper_bound(
      segments.begin(), segments.end(), step,
      [](uint64_t s, const DataSegment& seg) { return s < seg.start_step(); });
  // step < planned_until and segments[0] starts at 0: it > begin.
  const DataSegment& seg = *(it - 1);
  *response->mutable_segment() = seg;
  response->set_planned_until(it == segments.end() ? plan.planned_until()
                                                   : it->start_step());
}

DataSegment Segment(uint64_t start, uint64_t epoch, uint64_t offset,
                    const std::vector<uint32_t>& ranks) {
  DataSegment seg;
  seg.set_start_step(start);
  seg.set_epoch(epoch);
  seg.set_offset(offset);
  for (uint32_t r : ranks) seg.add_ranks(r);
  return seg;
}

// Seals `step` (== plan.planned_until()); whether a segment started.
absl::StatusOr<bool> Seal(DataPlan& plan, const JobSpec& spec, uint64_t step,
                          const std::vector<uint32_t>& members) {
  const uint64_t n = plan.train_examples();
  const uint64_t batch = spec.data().batch_size();
  const uint64_t room = static_cast<uint64_t>(members.size()) * batch;
  if (n / room == 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "data.batch_size: %d x %d workers is more than the %d training "
        "examples",
        batch, members.size(), n));
  }
  uint64_t epoch = 0, offset = 0;
  bool change = true;
  if (plan.segments_size() > 0) {
    const DataSegment& last = plan.segments(plan.segments_size() - 1);
    const uint64_t last_room = static_cast<uint64_t>(last.ranks_size()) * batch;
    epoch = last.epoch();
    offset = last.offset() + (step - last.start_step()) * last_room;
    change = !std::equal(last.ranks().begin(), last.ranks().end(),
                         members.begin(), members.end());
    if (n - offset < last_room) {
      ++epoch;  // the last segment's epoch is over
      offset = 0;
      change = true;
    } else if (spec.data_rescale() != DATA_RESCALE_AT_ONCE) {
      change = false;  // epoch boundaries only
    }
  }
  if (change && n - offset < room) {
    ++epoch;  // too few examples left for a step of the new ranks
    offset = 0;
  }
  if (epoch >= spec.data().epochs()) {
    plan.set_done(true);
    return false;
  }
  if (change) *plan.add_segments() = Segment(step, epoch, offset, members);
  const DataSegment& last = plan.segments(plan.segments_size() - 1);
  plan.set_planned_until(spec.data_rescale() == DATA_RESCALE_AT_ONCE
                             ? step + 1
                             : EpochEndStep(last, n, batch));
  return change;
}

}  // namespace

bool UsesElasticData(const JobSpec& spec) {
  const ModelSpec& m = spec.model();
  // A ctr model on generated data reads any example by its index; Criteo
  // TSV files are streamed in order (a fixed share per rank).
  const bool ctr_generated =
      m.has_ctr() && spec.data().dataset() == "ctr-synthetic";
  return spec.max_workers() > 0 &&
         (m.has_mlp() || m.has_cnn() || ctr_generated);
}

uint64_t EpochEndStep(const DataSegment& segment, uint64_t train_examples,
                      uint32_t batch_size) {
  const uint64_t room =
      static_cast<uint64_t>(segment.ranks_size()) * batch_size;
  if (room == 0 || segment.offset() > train_examples) {
    return segment.start_step();
  }
  return segment.start_step() + (train_examples - segment.offset()) / room;
}

namespace {

// AnswerDataPlan's work, on a plan the caller may throw away.
absl::StatusOr<PlanAnswer> AnswerOn(DataPlan& plan, const JobSpec& spec,
                                    uint64_t step, uint64_t train_examples,
                                    uint32_t caller_rank,
                                    const std::vector<uint32_t>& members,
                                    GetDataPlanResponse* response) {
  if (train_examples == 0) {
    return absl::InvalidArgumentError("train_examples: must be >= 1");
  }
  if (plan.train_examples() == 0) plan.set_train_examples(train_examples);
  if (plan.train_examples() != train_examples) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "train_examples: this worker loaded %d training examples, the job's "
        "plan was made for %d (the workers must load the same data set)",
        train_examples, plan.train_examples()));
  }
  if (step < plan.planned_until()) {
    Answer(plan, step, response);
    return PlanAnswer::kAnswered;
  }
  if (step > plan.planned_until()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("step: %d is past the job's planned steps (up to %d)",
                        step, plan.planned_until()));
  }
  if (plan.done()) {
    response->set_done(true);
    return PlanAnswer::kAnswered;
  }
  if (plan.segments_size() > 0) {
    const auto& ranks = plan.segments(plan.segments_size() - 1).ranks();
    if (std::find(ranks.begin(), ranks.end(), caller_rank) == ranks.end()) {
      return PlanAnswer::kNotYet;
    }
  }
  if (members.empty()) {
    return absl::FailedPreconditionError("ranks: no active worker to plan");
  }
  absl::StatusOr<bool> started = Seal(plan, spec, step, members);
  if (!started.ok()) return started.status();
  if (plan.done()) {
    response->set_done(true);
    return PlanAnswer::kAnswered;
  }
  Answer(plan, step, response);
  return *started ? PlanAnswer::kSealed : PlanAnswer::kAnswered;
}

}  // namespace

absl::StatusOr<PlanAnswer> AnswerDataPlan(DataPlan& plan, const JobSpec& spec,
                                          uint64_t step,
                                          uint64_t train_examples,
                                          uint32_t caller_rank,
                                          const std::vector<uint32_t>& members,
                                          GetDataPlanResponse* response) {
  response->Clear();
  // Worked on a copy: a refused ask leaves the plan as it was.
  DataPlan next = plan;
  absl::StatusOr<PlanAnswer> answer = AnswerOn(next, spec, step, train_examples,
                                               caller_rank, members, response);
  if (!answer.ok()) {
    response->Clear();
    return answer;
  }
  plan = std::move(next);
  return answer;
}

}  // namespace ps
