#include "worker/backend/deferred_backend.h"

#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(DeferredBackendTest, RunsNothingUntilSynchronize) {
  DeferredBackend dev;
  EXPECT_FALSE(dev.host_memory());
  absl::StatusOr<DeviceBuffer<float>> buf = dev.Allocate<float>(4);
  ASSERT_TRUE(buf.ok());
  std::vector<float> host = {1, 2, 3, 4};
  std::vector<float> out(4, 0.0f);
  dev.CopyToDevice(host.data(), 4, buf->data());
  dev.Scale(4, 2.0f, buf->data());
  dev.CopyToHost(buf->data(), 4, out.data());
  // The source is read at Synchronize(): a change now shows in the result.
  host[0] = 10;
  EXPECT_EQ(out, std::vector<float>(4, 0.0f));
  EXPECT_EQ(dev.calls_run(), 0);
  ASSERT_TRUE(dev.Synchronize().ok());
  EXPECT_EQ(out, (std::vector<float>{20, 4, 6, 8}));
  EXPECT_EQ(dev.calls_run(), 3);
}

TEST(DeferredBackendTest, FlagsHostPointersAndOverruns) {
  DeferredBackend dev;
  absl::StatusOr<DeviceBuffer<float>> buf = dev.Allocate<float>(6);
  ASSERT_TRUE(buf.ok());
  std::vector<float> host(16);
  struct Case {
    std::string name;
    std::function<void()> call;
    std::string want;
  };
  float* d = buf->data();
  const std::vector<Case> cases = {
      {"host a",
       [&] {
         dev.Gemm(Transpose::kNo, Transpose::kNo, 2, 3, 2, 1, host.data(), 2, d,
                  3, 0, d, 3);
       },
       "Gemm: a outside"},
      // 2x3 c with ldc 4 spans 7 floats > 6.
      {"overrun c",
       [&] {
         dev.Gemm(Transpose::kNo, Transpose::kNo, 2, 3, 1, 1, d, 1, d, 3, 0, d,
                  4);
       },
       "Gemm: c outside"},
      {"host bias", [&] { dev.BiasRelu(1, 3, host.data(), d); },
       "BiasRelu: bias outside"},
      {"copy into host", [&] { dev.CopyToDevice(d, 2, host.data()); },
       "CopyToDevice: device outside"},
      {"copy from device as host", [&] { dev.CopyToHost(d, 2, d + 2); },
       "CopyToHost: host is device memory"},
  };
  for (const Case& c : cases) {
    c.call();
    const absl::Status s = dev.Synchronize();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(s.message().find(c.want), std::string::npos)
        << c.name << ": " << s;
  }
  dev.Fill(6, 1.0f, d);
  EXPECT_TRUE(dev.Synchronize().ok());
}

TEST(DeferredBackendTest, FreedMemoryIsNoLongerDevice) {
  DeferredBackend dev;
  absl::StatusOr<DeviceBuffer<float>> buf = dev.Allocate<float>(4);
  ASSERT_TRUE(buf.ok());
  float* stale = buf->data();
  buf->reset();
  dev.Fill(4, 0.0f, stale);
  EXPECT_FALSE(dev.Synchronize().ok());
}

}  // namespace
}  // namespace ps
