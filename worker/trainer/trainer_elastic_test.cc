// The trainer of an elastic data job (TrainerOptions::data_plan): its steps
// and epochs follow the plan it is given, it asks once per segment, and it
// stops before a segment that leaves its rank out.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/model_spec.h"
#include "gtest/gtest.h"
#include "worker/client/testing/fake_parameter_client.h"
#include "worker/trainer/trainer.h"

namespace ps {
namespace {

// An MLP on 1200 synthetic examples, batches of 30, 2 epochs.
JobSpec Job() {
  JobSpec job;
  job.set_name("elastic-mlp");
  job.set_seed(17);
  Mlp* mlp = job.mutable_model()->mutable_mlp();
  mlp->set_input_dim(784);
  mlp->add_hidden(16);
  mlp->set_num_classes(10);
  DataSpec* data = job.mutable_data();
  data->set_dataset("synthetic");
  data->set_synthetic_train(1200);
  data->set_synthetic_test(100);
  data->set_batch_size(30);
  data->set_epochs(2);
  job.mutable_optimizer()->set_kind(SGD);
  job.mutable_optimizer()->set_learning_rate(0.05f);
  job.set_num_workers(1);
  job.set_max_workers(2);
  return job;
}

DataSegment Segment(uint64_t start, uint64_t epoch,
                    std::vector<uint32_t> ranks) {
  DataSegment s;
  s.set_start_step(start);
  s.set_epoch(epoch);
  for (uint32_t r : ranks) s.add_ranks(r);
  return s;
}

// Epoch 0 on rank 0 alone (1200 / 30 = 40 steps), epoch 1 over ranks
// `second` (1200 / (30 x its size) steps), then done. Counts the asks.
ElasticBatches::AskPlan Plan(std::vector<uint32_t> second,
                             std::vector<uint64_t>* asked) {
  return [second, asked](
             uint64_t step,
             uint64_t examples) -> absl::StatusOr<GetDataPlanResponse> {
    asked->push_back(step);
    EXPECT_EQ(examples, 1200u);
    GetDataPlanResponse r;
    const uint64_t end1 = 40 + 1200 / (30 * second.size());
    if (step < 40) {
      *r.mutable_segment() = Segment(0, 0, {0});
      r.set_planned_until(40);
    } else if (step < end1) {
      *r.mutable_segment() = Segment(40, 1, second);
      r.set_planned_until(end1);
    } else {
      r.set_done(true);
    }
    return r;
  };
}

struct Outcome {
  absl::Status status;
  uint64_t next_step = 0;
  uint64_t total_steps = 0;
  Progress last;
};

Outcome Train(const ElasticBatches::AskPlan& plan) {
  const JobSpec job = Job();
  FakeParameterServer server(
      *InitialParameters(job.seed(), ModelTensors(job.model())),
      FakeParameterServer::Options());
  std::unique_ptr<ParameterClient> client = server.NewClient(0);
  TrainerOptions options;
  options.job = job;
  options.num_workers = 2;  // the rank slots
  options.report_interval = absl::InfiniteDuration();
  options.data_plan = plan;
  Outcome out;
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(options, client.get());
  if (!trainer.ok()) {
    out.status = trainer.status();
    return out;
  }
  out.status = (*trainer)->Run(nullptr, nullptr);
  out.next_step = (*trainer)->next_step();
  out.total_steps = (*trainer)->total_steps();
  out.last = (*trainer)->last_progress();
  return out;
}

TEST(TrainerElasticTest, StepsFollowThePlanAndAsksOncePerSegment) {
  std::vector<uint64_t> asked;
  // Epoch 1 over ranks 0 and 1: 20 steps for rank 0.
  const Outcome out = Train(Plan({0, 1}, &asked));
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(out.total_steps, 60u);
  EXPECT_EQ(out.next_step, 60u);
  EXPECT_EQ(out.last.step(), 60u);
  EXPECT_EQ(out.last.total_steps(), 60u);
  EXPECT_EQ(out.last.epoch(), 2u);
  EXPECT_EQ(asked, (std::vector<uint64_t>{0, 40, 60}));
}

TEST(TrainerElasticTest, StopsBeforeASegmentWithoutItsRank) {
  std::vector<uint64_t> asked;
  const Outcome out = Train(Plan({1}, &asked));
  EXPECT_EQ(out.status.code(), absl::StatusCode::kCancelled) << out.status;
  EXPECT_NE(out.status.message().find("scaled down"), std::string::npos);
  EXPECT_EQ(out.next_step, 40u);
}

TEST(TrainerElasticTest, APlanErrorStopsTheRun) {
  const Outcome out = Train([](uint64_t, uint64_t) {
    return absl::StatusOr<GetDataPlanResponse>(
        absl::FailedPreconditionError("job_id: no data plan"));
  });
  EXPECT_EQ(out.status.code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ps
