#include "worker/backend/backend_factory.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(BackendFactoryTest, CreatesCpuBackends) {
  for (const std::string device : {"cpu:0", "cpu:3", "cpu:65536"}) {
    absl::StatusOr<std::unique_ptr<Backend>> b = CreateBackend(device, 1);
    ASSERT_TRUE(b.ok()) << device << ": " << b.status();
    EXPECT_EQ((*b)->device(), device);
    EXPECT_TRUE((*b)->host_memory());
  }
}

TEST(BackendFactoryTest, RejectsMalformedDevices) {
  for (const std::string device :
       {"", "cpu", "cpu:", ":0", "tpu:0", "CPU:0", "cpu:-1", "cpu:1x", "cpu: 1",
        "cpu:0:1", "gpu:x", "cpu:99999999999", "cpu:65537"}) {
    absl::StatusOr<std::unique_ptr<Backend>> b = CreateBackend(device, 1);
    ASSERT_FALSE(b.ok()) << device;
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << device;
    EXPECT_NE(b.status().message().find("device \"" + device + "\""),
              std::string::npos)
        << b.status();
  }
}

TEST(BackendFactoryTest, RejectsNegativeCpuThreads) {
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateBackend("cpu:0", -1);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("cpu_threads"), std::string::npos);
}

TEST(BackendFactoryTest, GpuBeyondVisibleDevicesFailsClearly) {
  // Holds with or without CUDA in the build and with or without a GPU.
  const std::string device = "gpu:" + std::to_string(GpuCount());
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateBackend(device, 0);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition)
      << b.status();
  EXPECT_NE(
      b.status().message().find(CudaBuilt() ? "no such GPU" : "without CUDA"),
      std::string::npos)
      << b.status();
}

TEST(BackendFactoryTest, GpuReducerRejectsCpuBackends) {
  absl::StatusOr<std::unique_ptr<Backend>> cpu = CreateBackend("cpu:0", 1);
  ASSERT_TRUE(cpu.ok());
  absl::StatusOr<std::unique_ptr<LocalReducer>> r =
      CreateGpuReducer({cpu->get()});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), CudaBuilt()
                                   ? absl::StatusCode::kInvalidArgument
                                   : absl::StatusCode::kFailedPrecondition)
      << r.status();
}

}  // namespace
}  // namespace ps
