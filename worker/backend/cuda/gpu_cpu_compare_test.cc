// The comparison harness on a GPU-like backend without a GPU: CpuBackend
// against DeferredBackend (worker/backend/deferred_backend.h), which computes
// on the CPU too, so every figure must be 0; and MaxRelativeDifference's cases.

#include "worker/backend/cuda/gpu_cpu_compare.h"

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "worker/backend/cpu/cpu_backend.h"
#include "worker/backend/deferred_backend.h"

namespace ps {
namespace {

TEST(GpuCpuCompareTest, BackendsThatComputeAlikeDifferByZero) {
  absl::StatusOr<std::unique_ptr<CpuBackend>> cpu = CpuBackend::Create(0, 1);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  DeferredBackend device;
  std::vector<Check> checks;
  ASSERT_TRUE(CompareMlpOps(cpu->get(), &device, &checks).ok());
  ASSERT_TRUE(CompareCnnOps(cpu->get(), &device, &checks).ok());
  ASSERT_TRUE(CompareModels(cpu->get(), &device, &checks).ok());
  // 10 MLP calls, 9 CNN calls; per model its 2 * layers gradient tensors
  // (MLP 3 layers, CNN 4), two losses and a count.
  EXPECT_EQ(checks.size(), 10u + 9u + (6u + 3u) + (8u + 3u));
  for (const Check& c : checks) {
    EXPECT_EQ(c.value, 0) << c.group << ": " << c.name;
    EXPECT_TRUE(c.pass()) << c.name;
  }
}

TEST(GpuCpuCompareTest, MaxRelativeDifference) {
  const float nan = std::nanf("");
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    std::vector<float> got, want;
    double expected;  // NaN: expect NaN
  };
  const Case cases[] = {
      {{1, -2}, {1, -2}, 0},
      {{1, -2.5f}, {1, -2}, 0.25},  // relative to max|want| = 2
      {{0, 0}, {0, 0}, 0},
      {{0, 1}, {0, 0}, inf},
      {{nan, 1}, {1, 1}, std::nan("")},  // an output never written
      {{1, 1}, {1, nan}, std::nan("")},
      {{1}, {1, 1}, std::nan("")},
  };
  for (const Case& c : cases) {
    const double d = MaxRelativeDifference(c.got, c.want);
    if (std::isnan(c.expected)) {
      EXPECT_TRUE(std::isnan(d)) << d;
      EXPECT_FALSE((Check{"ops", "x", d, 1}.pass()));
    } else {
      EXPECT_EQ(d, c.expected);
    }
  }
}

}  // namespace
}  // namespace ps
