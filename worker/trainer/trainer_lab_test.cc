// The trainer on the lab model (ModelSpec.lab): no data, a fixed wait per
// step, a constant gradient, and parameters that end exactly where the
// arithmetic says.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "core/model_spec.h"
#include "gtest/gtest.h"
#include "worker/client/testing/fake_parameter_client.h"
#include "worker/trainer/trainer.h"

namespace ps {
namespace {

// 2 layers of 4100 floats (3076 + 1024), 3 steps per epoch, 2 epochs.
JobSpec LabJob(double compute_ms) {
  JobSpec job;
  job.set_name("lab");
  LabModel* lab = job.mutable_model()->mutable_lab();
  lab->set_parameters(8200);
  lab->set_layers(2);
  lab->set_compute_ms(compute_ms);
  lab->set_steps_per_epoch(3);
  job.mutable_data()->set_batch_size(16);
  job.mutable_data()->set_epochs(2);
  job.mutable_optimizer()->set_kind(SGD);
  job.mutable_optimizer()->set_learning_rate(0.5f);
  return job;
}

TrainerOptions Options(const JobSpec& job, uint32_t rank) {
  TrainerOptions o;
  o.job = job;
  o.rank = rank;
  o.num_workers = 2;
  // Nothing is read from here: a lab model loads no data.
  o.data_dir = "/nonexistent/lab-reads-no-data";
  o.report_interval = absl::InfiniteDuration();
  return o;
}

// Overlapped: each layer (lab<i>/w + lab<i>/b) exchanged alone.
void TwoWorkersEndWhereTheArithmeticSays(bool overlap) {
  SCOPED_TRACE(overlap ? "overlap" : "blocking PushPull");
  const JobSpec job = LabJob(/*compute_ms=*/10);
  const std::vector<TensorSpec> tensors = ModelTensors(job.model());
  absl::StatusOr<std::vector<float>> initial = InitialParameters(1, tensors);
  ASSERT_TRUE(initial.ok()) << initial.status();
  ASSERT_EQ(initial->size(), 8200u);
  FakeParameterServer::Options server_options;
  server_options.learning_rate = 0.5f;
  server_options.num_workers = 2;
  if (overlap) server_options.tensors = tensors;
  FakeParameterServer server(*initial, server_options);
  auto c0 = server.NewClient(0);
  auto c1 = server.NewClient(1);
  TrainerOptions o0 = Options(job, 0), o1 = Options(job, 1);
  o0.fusion_bytes = o1.fusion_bytes = 1;
  absl::StatusOr<std::unique_ptr<Trainer>> t0 = Trainer::Create(o0, c0.get());
  absl::StatusOr<std::unique_ptr<Trainer>> t1 = Trainer::Create(o1, c1.get());
  ASSERT_TRUE(t0.ok()) << t0.status();
  ASSERT_TRUE(t1.ok()) << t1.status();
  EXPECT_EQ((*t0)->steps_per_epoch(), 3u);
  EXPECT_EQ((*t0)->total_steps(), 6u);

  Progress p0, p1;
  absl::Status s1;
  std::thread other(
      [&] { s1 = (*t1)->Run([&](const Progress& p) { p1 = p; }, nullptr); });
  const absl::Status s0 =
      (*t0)->Run([&](const Progress& p) { p0 = p; }, nullptr);
  other.join();
  ASSERT_TRUE(s0.ok()) << s0;
  ASSERT_TRUE(s1.ok()) << s1;
  EXPECT_EQ(server.version(), 6u);
  // 2 workers x 6 steps, each one PushPull or 2 per-layer exchanges.
  EXPECT_EQ(server.pushes(), overlap ? 24u : 12u);
  EXPECT_EQ(server.exchanges().size(), overlap ? 24u : 0u);
  EXPECT_EQ(p0.overlap(), overlap);

  // Mean gradient (1 + 2) / 2 / 1024 per step; 6 steps at lr 0.5 from zero.
  const float want = -6 * 0.5f * (1.5f / 1024);
  for (float p : server.parameters()) ASSERT_EQ(p, want);
  EXPECT_EQ((*t0)->parameters(), server.parameters());

  EXPECT_EQ(p0.step(), 6u);
  EXPECT_EQ(p0.total_steps(), 6u);
  EXPECT_EQ(p0.epoch(), 2u);
  EXPECT_EQ(p0.test_accuracy(), -1.0f);  // no evaluation
  EXPECT_EQ(p0.data_s(), 0.0);
  EXPECT_GE(p0.compute_s(), 6 * 0.010);  // the waits count as compute
  EXPECT_GT(p0.samples_per_s(), 0.0);
  EXPECT_EQ(p1.step(), 6u);
}

TEST(TrainerLabTest, TwoWorkersEndWhereTheArithmeticSays) {
  TwoWorkersEndWhereTheArithmeticSays(false);
  TwoWorkersEndWhereTheArithmeticSays(true);
}

TEST(TrainerLabTest, StartStepPastTheEndIsRejected) {
  FakeParameterServer server(std::vector<float>(8200), {});
  auto client = server.NewClient(0);
  TrainerOptions options = Options(LabJob(0), 0);
  options.num_workers = 1;
  options.start_step = 7;
  absl::StatusOr<std::unique_ptr<Trainer>> t =
      Trainer::Create(options, client.get());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("start_step"), std::string::npos);
}

}  // namespace
}  // namespace ps
