#include "worker/trainer/lab_workload.h"

#include <ctime>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

ModelSpec Lab(uint64_t parameters, uint32_t layers, double compute_ms) {
  ModelSpec s;
  s.mutable_lab()->set_parameters(parameters);
  s.mutable_lab()->set_layers(layers);
  s.mutable_lab()->set_compute_ms(compute_ms);
  s.mutable_lab()->set_steps_per_epoch(7);
  return s;
}

TEST(LabWorkloadTest, GradientIsAnExactBinaryFractionPerRank) {
  EXPECT_EQ(LabGradient(0), 1.0f / 1024);
  EXPECT_EQ(LabGradient(1), 2.0f / 1024);
  EXPECT_EQ(LabGradient(7), 8.0f / 1024);
}

TEST(LabWorkloadTest, SizesAndGradientFollowTheSpec) {
  absl::StatusOr<std::unique_ptr<LabWorkload>> lab =
      LabWorkload::Create(Lab(3000001, 3, 2.5), /*rank=*/2);
  ASSERT_TRUE(lab.ok()) << lab.status();
  EXPECT_EQ((*lab)->num_parameters(), 3000000u);  // 3 * floor(3000001 / 3)
  EXPECT_EQ((*lab)->steps_per_epoch(), 7u);
  EXPECT_EQ((*lab)->compute_time(), absl::Microseconds(2500));
  std::vector<float> grad((*lab)->num_parameters(), -1.0f);
  (*lab)->FillGradient(absl::MakeSpan(grad));
  for (float g : grad) ASSERT_EQ(g, 3.0f / 1024);
}

TEST(LabWorkloadTest, RejectsOtherModelsAndBadFields) {
  ModelSpec mlp;
  mlp.mutable_mlp()->set_input_dim(4);
  mlp.mutable_mlp()->set_num_classes(2);
  absl::StatusOr<std::unique_ptr<LabWorkload>> lab =
      LabWorkload::Create(mlp, 0);
  EXPECT_EQ(lab.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(lab.status().message().find("model.lab"), std::string::npos);
  lab = LabWorkload::Create(Lab(1000, 1, 0), 0);
  EXPECT_EQ(lab.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(lab.status().message().find("model.lab.parameters"),
            std::string::npos)
      << lab.status();
}

// The wait takes wall time but next to no CPU: workers sharing cores do not
// slow each other down.
TEST(LabWorkloadTest, ComputeWaitsWithoutUsingTheCpu) {
  absl::StatusOr<std::unique_ptr<LabWorkload>> lab =
      LabWorkload::Create(Lab(4100, 4, 200), 0);
  ASSERT_TRUE(lab.ok()) << lab.status();
  const std::clock_t cpu0 = std::clock();
  const absl::Time t0 = absl::Now();
  (*lab)->Compute();
  const absl::Duration wall = absl::Now() - t0;
  const double cpu_s =
      static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
  EXPECT_GE(wall, absl::Milliseconds(200));
  EXPECT_LT(cpu_s, 0.05) << "the wait used the CPU";

  absl::StatusOr<std::unique_ptr<LabWorkload>> none =
      LabWorkload::Create(Lab(4100, 4, 0), 0);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ((*none)->compute_time(), absl::ZeroDuration());
  (*none)->Compute();  // returns at once
}

}  // namespace
}  // namespace ps
