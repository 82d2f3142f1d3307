// The CUDA backend's convolution and pooling ops give the CPU backend's bits
// (both compute each element with elementwise.h's *At functions). Skips
// when no GPU is visible; it always compiles and links where CUDA is built.

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/backend/cpu/cpu_backend.h"
#include "worker/backend/cuda/cuda_backend.h"

namespace ps {
namespace {

template <typename T>
std::vector<T> RunOnGpu(CudaBackend* gpu, const std::vector<T>& host_in,
                        size_t out_size,
                        const std::function<void(const T*, T*)>& op) {
  absl::StatusOr<DeviceBuffer<T>> in = gpu->Allocate<T>(host_in.size());
  absl::StatusOr<DeviceBuffer<T>> out = gpu->Allocate<T>(out_size);
  EXPECT_TRUE(in.ok() && out.ok());
  gpu->CopyToDevice(host_in.data(), host_in.size(), in->data());
  op(in->data(), out->data());
  std::vector<T> result(out_size);
  gpu->CopyToHost(static_cast<const T*>(out->data()), out_size, result.data());
  EXPECT_TRUE(gpu->Synchronize().ok());
  return result;
}

TEST(CudaConvTest, ConvAndPoolOpsMatchCpuBitwise) {
  if (CudaBackend::DeviceCount() == 0) {
    GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount reports 0)";
  }
  absl::StatusOr<std::unique_ptr<CudaBackend>> gpu = CudaBackend::Create(0);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  absl::StatusOr<std::unique_ptr<CpuBackend>> cpu = CpuBackend::Create(0, 1);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const ImageShape s{3, 9, 7, 4};
  const int k = 5;
  const int pool = 2;
  const size_t image = 3 * 9 * 7 * 4;
  const size_t cols = image * k * k;
  const size_t pooled = 3 * 4 * 3 * 4;
  std::vector<float> x(image), g(cols), dy(pooled);
  for (float& v : x) v = dist(rng);
  for (float& v : g) v = dist(rng);
  for (float& v : dy) v = dist(rng);

  std::vector<float> want(cols);
  (*cpu)->Im2Col(s, k, x.data(), want.data());
  EXPECT_EQ(RunOnGpu<float>(gpu->get(), x, cols,
                            [&](const float* in, float* out) {
                              (*gpu)->Im2Col(s, k, in, out);
                            }),
            want);

  want.assign(image, 0);
  (*cpu)->Col2Im(s, k, g.data(), want.data());
  EXPECT_EQ(RunOnGpu<float>(gpu->get(), g, image,
                            [&](const float* in, float* out) {
                              (*gpu)->Col2Im(s, k, in, out);
                            }),
            want);

  std::vector<float> y(pooled);
  std::vector<int32_t> arg(pooled);
  (*cpu)->MaxPool(s, pool, x.data(), y.data(), arg.data());
  absl::StatusOr<DeviceBuffer<int32_t>> dev_arg =
      (*gpu)->Allocate<int32_t>(pooled);
  ASSERT_TRUE(dev_arg.ok());
  EXPECT_EQ(RunOnGpu<float>(gpu->get(), x, pooled,
                            [&](const float* in, float* out) {
                              (*gpu)->MaxPool(s, pool, in, out,
                                              dev_arg->data());
                            }),
            y);
  std::vector<int32_t> gpu_arg(pooled);
  (*gpu)->CopyToHost(static_cast<const int32_t*>(dev_arg->data()), pooled,
                     gpu_arg.data());
  ASSERT_TRUE((*gpu)->Synchronize().ok());
  EXPECT_EQ(gpu_arg, arg);

  want.assign(image, 0);
  (*cpu)->MaxPoolBackward(s, pool, arg.data(), dy.data(), want.data());
  ASSERT_TRUE((*cpu)->Synchronize().ok());
  EXPECT_EQ(RunOnGpu<float>(gpu->get(), dy, image,
                            [&](const float* in, float* out) {
                              (*gpu)->MaxPoolBackward(s, pool, dev_arg->data(),
                                                      in, out);
                            }),
            want);
  dev_arg->reset();
}

TEST(CudaConvTest, BadArgumentsReportedAtSynchronize) {
  if (CudaBackend::DeviceCount() == 0) {
    GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount reports 0)";
  }
  absl::StatusOr<std::unique_ptr<CudaBackend>> gpu = CudaBackend::Create(0);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  (*gpu)->Im2Col({1, 4, 4, 1}, 4, nullptr, nullptr);
  const absl::Status s = (*gpu)->Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Im2Col: kernel = 4"), std::string::npos) << s;
}

}  // namespace
}  // namespace ps
