#include "worker/backend/deferred_backend.h"

#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/backend/testing/embedding_bag_test_util.h"

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

// Copies `host` into a new device buffer kept in *keep.
template <typename T>
T* Upload(DeferredBackend* dev, const std::vector<T>& host,
          std::vector<DeviceBuffer<T>>* keep) {
  absl::StatusOr<DeviceBuffer<T>> b = dev->Allocate<T>(host.size());
  EXPECT_TRUE(b.ok());
  dev->CopyToDevice(host.data(), host.size(), b->data());
  keep->push_back(*std::move(b));
  return keep->back().data();
}

TEST(DeferredBackendTest, EmbeddingBagMatchesCpuAndChecksExtents) {
  DeferredBackend dev;
  absl::StatusOr<std::unique_ptr<CpuBackend>> cpu = CpuBackend::Create(0, 0);
  ASSERT_TRUE(cpu.ok());
  const HostBags bags({0, 2, 2, 5}, {1, 0, 2, 1, 1}, 3);
  const int dim = 3, bags_per_row = 3, stride = 10;
  const std::vector<float> rows = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<DeviceBuffer<int32_t>> ints;
  std::vector<DeviceBuffer<float>> floats;
  EmbeddingBatch d;
  d.num_bags = bags.num_bags();
  d.num_rows = bags.num_rows;
  d.num_indices = static_cast<int>(bags.indices.size());
  d.offsets = Upload(&dev, bags.offsets, &ints);
  d.indices = Upload(&dev, bags.indices, &ints);
  d.row_offsets = Upload(&dev, bags.row_offsets, &ints);
  d.row_occurrences = Upload(&dev, bags.row_occurrences, &ints);
  float* d_rows = Upload(&dev, rows, &floats);
  // Uploads read their source at Synchronize(): keep it alive until then.
  const std::vector<float> zeros(stride, 0.0f);
  float* d_out = Upload(&dev, zeros, &floats);
  float* d_grad = Upload(&dev, rows, &floats);
  dev.EmbeddingBagForward(Pooling::kMean, d, dim, d_rows, bags_per_row, stride,
                          d_out);
  dev.EmbeddingBagBackward(Pooling::kMean, d, dim, d_out, bags_per_row, stride,
                           d_grad);
  std::vector<float> out(stride), grad(rows.size());
  dev.CopyToHost(d_out, out.size(), out.data());
  dev.CopyToHost(d_grad, grad.size(), grad.data());
  ASSERT_TRUE(dev.Synchronize().ok());

  std::vector<float> want_out(stride, 0.0f), want_grad(rows.size());
  (*cpu)->EmbeddingBagForward(Pooling::kMean, bags.Batch(), dim, rows.data(),
                              bags_per_row, stride, want_out.data());
  (*cpu)->EmbeddingBagBackward(Pooling::kMean, bags.Batch(), dim,
                               want_out.data(), bags_per_row, stride,
                               want_grad.data());
  ASSERT_TRUE((*cpu)->Synchronize().ok());
  EXPECT_EQ(out, want_out);
  EXPECT_EQ(grad, want_grad);

  // Host arrays in a device call, and an output past its allocation (d_out
  // holds 10 floats; with 2 bags per row of stride 10, bag 2 ends at 13).
  EmbeddingBatch host_indices = d;
  host_indices.indices = bags.indices.data();
  dev.EmbeddingBagForward(Pooling::kSum, host_indices, dim, d_rows,
                          bags_per_row, stride, d_out);
  absl::Status s = dev.Synchronize();
  EXPECT_NE(s.message().find("EmbeddingBagForward: indices outside"),
            std::string::npos)
      << s;
  dev.EmbeddingBagForward(Pooling::kSum, d, dim, d_rows, 2, stride, d_out);
  s = dev.Synchronize();
  EXPECT_NE(s.message().find("out outside"), std::string::npos) << s;
  EmbeddingBatch host_csr = d;
  host_csr.row_occurrences = bags.row_occurrences.data();
  dev.EmbeddingBagBackward(Pooling::kSum, host_csr, dim, d_out, bags_per_row,
                           stride, d_grad);
  s = dev.Synchronize();
  EXPECT_NE(s.message().find("row_occurrences outside"), std::string::npos)
      << s;
  // Contents are checked when the call runs, by the CPU backend.
  std::vector<int32_t> bad = bags.indices;
  bad[0] = 3;
  int32_t* d_bad = Upload(&dev, bad, &ints);
  EmbeddingBatch bad_batch = d;
  bad_batch.indices = d_bad;
  dev.EmbeddingBagForward(Pooling::kSum, bad_batch, dim, d_rows, bags_per_row,
                          stride, d_out);
  s = dev.Synchronize();
  EXPECT_NE(s.message().find("indices[0] = 3 outside"), std::string::npos) << s;
}

}  // namespace
}  // namespace ps
