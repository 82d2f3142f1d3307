// The elastic data split end to end in one process: the coordinator's plan
// (server/coordinator/data_plan.h) driven by the workers' asks, and each
// worker's examples (worker/data/elastic_sampler.h). Counts every example
// each epoch: across a change of the workers, at an epoch boundary or at
// once, none is read twice and none skipped (600 examples divide into whole
// steps of 2 and of 3 workers).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "gtest/gtest.h"
#include "server/coordinator/data_plan.h"
#include "worker/data/elastic_sampler.h"

namespace ps {
namespace {

constexpr uint64_t kExamples = 600;
constexpr uint32_t kBatch = 10;

JobSpec Spec(DataRescale rescale) {
  JobSpec spec;
  spec.mutable_model()->mutable_mlp()->set_input_dim(4);
  spec.mutable_data()->set_batch_size(kBatch);
  spec.mutable_data()->set_epochs(3);
  spec.set_num_workers(2);
  spec.set_max_workers(3);
  spec.set_seed(11);
  spec.set_data_rescale(rescale);
  return spec;
}

// Runs the job as BSP workers would: before each step every rank slot asks
// its plan (rank 0 first, so it seals), and the ranks the plan names read
// their batch. `members(step)`: the ranks that read from a new segment
// sealed at that step (DataMembers: those with a worker, less leavers).
// Returns, per epoch, how often each example was read.
std::map<uint64_t, std::vector<int>> RunPlan(
    const JobSpec& spec,
    const std::function<std::vector<uint32_t>(uint64_t)>& members) {
  DataPlan plan;
  absl::StatusOr<ElasticSampler> sampler =
      ElasticSampler::Create(kExamples, kBatch, spec.seed());
  EXPECT_TRUE(sampler.ok()) << sampler.status();
  std::map<uint64_t, std::vector<int>> reads;
  std::vector<uint32_t> indices;
  for (uint64_t step = 0; step < 1000; ++step) {
    const std::vector<uint32_t> now = members(step);
    bool done = false;
    for (uint32_t rank : {0u, 1u, 2u}) {
      GetDataPlanResponse r;
      absl::StatusOr<PlanAnswer> a =
          AnswerDataPlan(plan, spec, step, kExamples, rank, now, &r);
      EXPECT_TRUE(a.ok()) << a.status();
      if (!a.ok() || *a == PlanAnswer::kNotYet) continue;  // a joiner waits
      if (r.done()) {
        done = true;
        break;
      }
      const auto& ranks = r.segment().ranks();
      if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) continue;
      EXPECT_TRUE(sampler->StepIndices(r.segment(), step, rank, &indices).ok());
      std::vector<int>& epoch = reads[r.segment().epoch()];
      epoch.resize(kExamples);
      for (uint32_t i : indices) ++epoch[i];
    }
    if (done) break;
  }
  return reads;
}

void ExpectEachReadOnce(const std::map<uint64_t, std::vector<int>>& reads) {
  ASSERT_EQ(reads.size(), 3u);
  for (const auto& [epoch, counts] : reads) {
    int twice = 0, skipped = 0;
    for (int c : counts) {
      twice += c > 1;
      skipped += c == 0;
    }
    EXPECT_EQ(twice, 0) << "epoch " << epoch;
    EXPECT_EQ(skipped, 0) << "epoch " << epoch;
  }
}

TEST(ElasticDataTest, AGrowthAtTheEpochBoundaryReadsEveryExampleOnce) {
  // Rank 2 joins during epoch 0 (step 7 of 30) and reads from epoch 1;
  // rank 1 leaves during epoch 1 (step 35) and reads to its end.
  ExpectEachReadOnce(RunPlan(Spec(DATA_RESCALE_EPOCH), [](uint64_t step) {
    if (step < 7) return std::vector<uint32_t>{0, 1};
    if (step < 35) return std::vector<uint32_t>{0, 1, 2};
    return std::vector<uint32_t>{0, 2};
  }));
}

TEST(ElasticDataTest, AGrowthAtOnceSplitsTheRestOfTheEpochOnce) {
  // Rank 2 joins at step 6 (120 examples read, 480 left: 16 steps of 3).
  ExpectEachReadOnce(RunPlan(Spec(DATA_RESCALE_AT_ONCE), [](uint64_t step) {
    return step < 6 ? std::vector<uint32_t>{0, 1}
                    : std::vector<uint32_t>{0, 1, 2};
  }));
}

}  // namespace
}  // namespace ps
