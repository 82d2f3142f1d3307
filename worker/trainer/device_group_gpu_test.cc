// DeviceGroup's NCCL path: with 2+ GPUs the replicas' gradients are summed
// on the GPUs and must match one CPU replica to float rounding. Skips
// without two visible GPUs (or without CUDA in the build).
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/backend/backend_factory.h"
#include "worker/trainer/device_group.h"
#include "worker/trainer/testing/device_group_test_util.h"

namespace ps {
namespace {

std::vector<std::string> Gpus(int count) {
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) out.push_back("gpu:" + std::to_string(i));
  return out;
}

class DeviceGroupGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CudaBuilt()) GTEST_SKIP() << "built without CUDA";
    if (GpuCount() < 2) {
      GTEST_SKIP() << "needs 2 GPUs, " << GpuCount() << " visible";
    }
  }
};

TEST_F(DeviceGroupGpuTest, TwoOrMoreGpusReduceWithNccl) {
  DeviceGroup::Options options;
  options.devices = Gpus(GpuCount());
  options.max_batch = 64;
  absl::StatusOr<std::unique_ptr<DeviceGroup>> group =
      DeviceGroup::Create(Mlp(784, {32, 16}, 10), options);
  ASSERT_TRUE(group.ok()) << group.status();
#ifdef PS_HAVE_NCCL
  EXPECT_TRUE((*group)->reduces_on_devices());
#else
  EXPECT_FALSE((*group)->reduces_on_devices());
#endif
}

TEST_F(DeviceGroupGpuTest, NcclSumMatchesOneCpuReplica) {
  const Result cpu = Gradient({"cpu:0"}, {}, 64);
  ExpectClose(cpu, Gradient(Gpus(GpuCount()), {}, 64));
  ExpectClose(cpu, Gradient(Gpus(2), {3, 1}, 64));
}

// Fewer examples than GPUs: a GPU with an empty slice still joins the
// all-reduce with a zero gradient.
TEST_F(DeviceGroupGpuTest, EmptySlicesJoinTheAllReduce) {
  ExpectClose(Gradient({"cpu:0"}, {}, 1), Gradient(Gpus(2), {1, 1e-9}, 1));
}

// A CPU/GPU mix sums on the host.
TEST_F(DeviceGroupGpuTest, MixedDevicesReduceOnTheHost) {
  DeviceGroup::Options options;
  options.devices = {"cpu:0", "gpu:0", "gpu:1"};
  options.max_batch = 64;
  absl::StatusOr<std::unique_ptr<DeviceGroup>> group =
      DeviceGroup::Create(Mlp(784, {32, 16}, 10), options);
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_FALSE((*group)->reduces_on_devices());
}

}  // namespace
}  // namespace ps
