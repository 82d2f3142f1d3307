// CudaBackend::EmbeddingBagForward/Backward against the CPU backend: the
// same bits for sum and mean pooling (both sum in occurrence order and divide
// for the mean), on random batches with skewed ids, several dims (below, at
// and above a warp) and strided outputs; device-side contents checks. Skips
// when no GPU is visible.

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/backend/cpu/cpu_backend.h"
#include "worker/backend/cuda/cuda_backend.h"
#include "worker/backend/testing/embedding_bag_test_util.h"

namespace ps {
namespace {

// Bags of 0..max_bag ids drawn from num_rows rows with a skew (low rows are
// hot, as Zipf ids are after de-duplication in first-occurrence order).
HostBags RandomBags(int num_bags, int num_rows, int max_bag,
                    std::mt19937* rng) {
  std::uniform_int_distribution<int> size(0, max_bag);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<int32_t> offsets = {0}, indices;
  for (int b = 0; b < num_bags; ++b) {
    const int n = max_bag == 1 ? 1 : size(*rng);
    for (int i = 0; i < n; ++i) {
      const double x = u(*rng);
      indices.push_back(static_cast<int32_t>(x * x * x * num_rows));
    }
    offsets.push_back(static_cast<int32_t>(indices.size()));
  }
  return HostBags(std::move(offsets), std::move(indices), num_rows);
}

class CudaEmbeddingBagTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaBackend::DeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount reports 0)";
    }
    absl::StatusOr<std::unique_ptr<CudaBackend>> gpu = CudaBackend::Create(0);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = *std::move(gpu);
    absl::StatusOr<std::unique_ptr<CpuBackend>> cpu = CpuBackend::Create(0, 1);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    cpu_ = *std::move(cpu);
  }

  void TearDown() override {
    floats_.clear();
    ints_.clear();
  }

  template <typename T>
  T* Upload(const std::vector<T>& host, std::vector<DeviceBuffer<T>>* keep) {
    absl::StatusOr<DeviceBuffer<T>> b =
        gpu_->Allocate<T>(std::max<size_t>(host.size(), 1));
    EXPECT_TRUE(b.ok()) << b.status();
    gpu_->CopyToDevice(host.data(), host.size(), b->data());
    EXPECT_TRUE(gpu_->Synchronize().ok());
    keep->push_back(*std::move(b));
    return keep->back().data();
  }

  float* UploadFloats(const std::vector<float>& host) {
    return Upload(host, &floats_);
  }

  EmbeddingBatch UploadBatch(const HostBags& bags) {
    EmbeddingBatch d = bags.Batch();
    d.offsets = Upload(bags.offsets, &ints_);
    d.indices = Upload(bags.indices, &ints_);
    d.row_offsets = Upload(bags.row_offsets, &ints_);
    d.row_occurrences = Upload(bags.row_occurrences, &ints_);
    return d;
  }

  std::vector<float> Download(const float* device, size_t n) {
    std::vector<float> host(n);
    gpu_->CopyToHost(device, n, host.data());
    EXPECT_TRUE(gpu_->Synchronize().ok());
    return host;
  }

  std::unique_ptr<CudaBackend> gpu_;
  std::unique_ptr<CpuBackend> cpu_;
  std::vector<DeviceBuffer<float>> floats_;
  std::vector<DeviceBuffer<int32_t>> ints_;
};

struct Shape {
  int num_bags, num_rows, max_bag, dim, bags_per_row, pad;
};

TEST_F(CudaEmbeddingBagTest, SameBitsAsCpu) {
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const Shape shapes[] = {
      {512 * 26, 8000, 1, 16, 26, 13},  // the CTR step: one id per field
      {1000, 300, 6, 5, 1, 0},          // multi-id bags, odd dim
      {777, 50, 40, 33, 3, 7},          // long hot rows, dim > warp
      {64, 10, 3, 64, 8, 1},           {5, 4, 0, 16, 1, 0},  // all bags empty
  };
  for (const Shape& s : shapes) {
    const HostBags bags = RandomBags(s.num_bags, s.num_rows, s.max_bag, &rng);
    const int stride = s.bags_per_row * s.dim + s.pad;
    const size_t out_rows = (s.num_bags + s.bags_per_row - 1) / s.bags_per_row;
    std::vector<float> rows(static_cast<size_t>(s.num_rows) * s.dim);
    for (float& x : rows) x = u(rng);
    std::vector<float> grad_out(out_rows * stride);
    for (float& x : grad_out) x = u(rng);
    const EmbeddingBatch d = UploadBatch(bags);
    const float* d_rows = UploadFloats(rows);
    const float* d_grad_out = UploadFloats(grad_out);
    for (Pooling pooling : {Pooling::kSum, Pooling::kMean}) {
      const std::string what = "dim " + std::to_string(s.dim) + " bags " +
                               std::to_string(s.num_bags) +
                               (pooling == Pooling::kSum ? " sum" : " mean");
      // Pad columns hold a sentinel that must survive.
      std::vector<float> out(out_rows * stride, -7.0f);
      std::vector<float> grad(rows.size(), -7.0f);
      float* d_out = UploadFloats(out);
      float* d_grad = UploadFloats(grad);
      cpu_->EmbeddingBagForward(pooling, bags.Batch(), s.dim, rows.data(),
                                s.bags_per_row, stride, out.data());
      cpu_->EmbeddingBagBackward(pooling, bags.Batch(), s.dim, grad_out.data(),
                                 s.bags_per_row, stride, grad.data());
      ASSERT_TRUE(cpu_->Synchronize().ok()) << what;
      gpu_->EmbeddingBagForward(pooling, d, s.dim, d_rows, s.bags_per_row,
                                stride, d_out);
      gpu_->EmbeddingBagBackward(pooling, d, s.dim, d_grad_out, s.bags_per_row,
                                 stride, d_grad);
      ASSERT_TRUE(gpu_->Synchronize().ok()) << what;
      EXPECT_EQ(Download(d_out, out.size()), out) << what;
      EXPECT_EQ(Download(d_grad, grad.size()), grad) << what;
    }
  }
}

TEST_F(CudaEmbeddingBagTest, BadContentsAreReportedAtSynchronize) {
  const HostBags good({0, 2, 3}, {0, 1, 1}, 2);
  struct Case {
    std::string name;
    HostBags bags;
    bool backward;
    std::string want;
  };
  HostBags bad_index = good;
  bad_index.indices[1] = 2;
  HostBags bad_offsets = good;
  bad_offsets.offsets[1] = 4;
  HostBags bad_csr = good;
  bad_csr.row_occurrences = {1, 0, 2};
  const std::vector<Case> cases = {
      {"index", bad_index, false, "index is outside"},
      {"offsets", bad_offsets, true, "offsets are not"},
      {"csr", bad_csr, true, "not the ascending inverse"},
  };
  const float* d_rows = UploadFloats({1, 2, 3, 4});
  for (const Case& c : cases) {
    const EmbeddingBatch d = UploadBatch(c.bags);
    std::vector<float> sentinel(4, -7.0f);
    float* d_out = UploadFloats(sentinel);
    if (c.backward) {
      gpu_->EmbeddingBagBackward(Pooling::kSum, d, 2, d_rows, 1, 2, d_out);
    } else {
      gpu_->EmbeddingBagForward(Pooling::kSum, d, 2, d_rows, 1, 2, d_out);
    }
    const absl::Status s = gpu_->Synchronize();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(s.message().find(c.want), std::string::npos) << s;
    // A no-op, and the flags are clear again for the next call.
    EXPECT_EQ(Download(d_out, 4), sentinel) << c.name;
    const EmbeddingBatch ok = UploadBatch(good);
    gpu_->EmbeddingBagForward(Pooling::kSum, ok, 2, d_rows, 1, 2, d_out);
    EXPECT_TRUE(gpu_->Synchronize().ok()) << c.name;
    EXPECT_EQ(Download(d_out, 4), (std::vector<float>{4, 6, 3, 4})) << c.name;
  }
}

}  // namespace
}  // namespace ps
