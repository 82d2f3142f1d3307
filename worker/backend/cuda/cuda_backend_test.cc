// Compares the CUDA backend with the CPU backend on random inputs. Skips when
// no GPU is visible; it always compiles and links where CUDA is built.

#include "worker/backend/cuda/cuda_backend.h"

#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "worker/backend/cpu/cpu_backend.h"
#include "worker/backend/cuda/gpu_reducer.h"

namespace ps {
namespace {

std::vector<float> RandomVector(size_t n, std::mt19937* rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

class CudaBackendTest : public ::testing::Test {
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

  // A device copy of `host`, kept alive by the fixture.
  float* Upload(const std::vector<float>& host) {
    absl::StatusOr<DeviceBuffer<float>> b = gpu_->Allocate<float>(host.size());
    EXPECT_TRUE(b.ok()) << b.status();
    gpu_->CopyToDevice(host.data(), host.size(), b->data());
    // `host` may be a temporary or change next: finish the copy now.
    EXPECT_TRUE(gpu_->Synchronize().ok());
    buffers_.push_back(*std::move(b));
    return buffers_.back().data();
  }

  int32_t* UploadLabels(const std::vector<int32_t>& host) {
    absl::StatusOr<DeviceBuffer<int32_t>> b =
        gpu_->Allocate<int32_t>(host.size());
    EXPECT_TRUE(b.ok()) << b.status();
    gpu_->CopyToDevice(host.data(), host.size(), b->data());
    EXPECT_TRUE(gpu_->Synchronize().ok());
    labels_.push_back(*std::move(b));
    return labels_.back().data();
  }

  std::vector<float> Download(const float* device, size_t n) {
    absl::StatusOr<HostBuffer<float>> h = gpu_->AllocateHost<float>(n);
    EXPECT_TRUE(h.ok()) << h.status();
    gpu_->CopyToHost(device, n, h->data());
    EXPECT_TRUE(gpu_->Synchronize().ok());
    return std::vector<float>(h->data(), h->data() + n);
  }

  static void ExpectClose(const std::vector<float>& got,
                          const std::vector<float>& want, float tol) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << i;
    }
  }

  std::unique_ptr<CudaBackend> gpu_;
  std::unique_ptr<CpuBackend> cpu_;
  std::mt19937 rng_{11};
  std::vector<DeviceBuffer<float>> buffers_;
  std::vector<DeviceBuffer<int32_t>> labels_;

  void TearDown() override {
    // Buffers before their backend.
    buffers_.clear();
    labels_.clear();
  }
};

TEST_F(CudaBackendTest, GemmAllTransposesMatchCpu) {
  for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
    for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
      const int m = 37, n = 53, k = 129;
      const int lda = (ta == Transpose::kNo ? k : m) + 2;
      const int ldb = (tb == Transpose::kNo ? n : k) + 1;
      const int ldc = n + 3;
      std::vector<float> a =
          RandomVector((ta == Transpose::kNo ? m : k) * lda, &rng_);
      std::vector<float> b =
          RandomVector((tb == Transpose::kNo ? k : n) * ldb, &rng_);
      std::vector<float> c = RandomVector(m * ldc, &rng_);
      float* da = Upload(a);
      float* db = Upload(b);
      float* dc = Upload(c);
      gpu_->Gemm(ta, tb, m, n, k, 0.75f, da, lda, db, ldb, 0.5f, dc, ldc);
      cpu_->Gemm(ta, tb, m, n, k, 0.75f, a.data(), lda, b.data(), ldb, 0.5f,
                 c.data(), ldc);
      ExpectClose(Download(dc, c.size()), c, 1e-4f);
    }
  }
  EXPECT_TRUE(gpu_->Synchronize().ok());
}

TEST_F(CudaBackendTest, ElementwiseOpsMatchCpu) {
  const int rows = 65, cols = 300;
  const size_t n = static_cast<size_t>(rows) * cols;
  std::vector<float> x = RandomVector(n, &rng_);
  std::vector<float> bias = RandomVector(cols, &rng_);
  std::vector<float> dy = RandomVector(n, &rng_);
  std::vector<float> y0 = RandomVector(cols, &rng_);
  float* dx = Upload(x);
  float* dbias = Upload(bias);
  float* ddy = Upload(dy);
  float* dy0 = Upload(y0);

  std::vector<float> relu_cpu = x;
  cpu_->BiasRelu(rows, cols, bias.data(), relu_cpu.data());
  gpu_->BiasRelu(rows, cols, dbias, dx);
  ExpectClose(Download(dx, n), relu_cpu, 0);

  std::vector<float> grad_cpu(n);
  cpu_->ReluBackward(n, relu_cpu.data(), dy.data(), grad_cpu.data());
  gpu_->ReluBackward(n, dx, ddy, ddy);
  ExpectClose(Download(ddy, n), grad_cpu, 0);

  cpu_->ColumnSums(rows, cols, 1.0f, grad_cpu.data(), 0.5f, y0.data());
  gpu_->ColumnSums(rows, cols, 1.0f, ddy, 0.5f, dy0);
  ExpectClose(Download(dy0, cols), y0, 1e-5f);

  cpu_->BiasAdd(rows, cols, bias.data(), grad_cpu.data());
  gpu_->BiasAdd(rows, cols, dbias, ddy);
  cpu_->Axpy(n, -0.5f, relu_cpu.data(), grad_cpu.data());
  gpu_->Axpy(n, -0.5f, dx, ddy);
  cpu_->Scale(n, 3.0f, grad_cpu.data());
  gpu_->Scale(n, 3.0f, ddy);
  ExpectClose(Download(ddy, n), grad_cpu, 1e-6f);

  gpu_->Fill(n, 2.5f, ddy);
  gpu_->Relu(n, ddy, dx);
  ExpectClose(Download(dx, n), std::vector<float>(n, 2.5f), 0);
  EXPECT_TRUE(gpu_->Synchronize().ok());
}

TEST_F(CudaBackendTest, SoftmaxCrossEntropyMatchesCpu) {
  // Past one reduction block (256 threads) to cover the strided partials.
  const int rows = 1000, classes = 10;
  std::vector<float> logits = RandomVector(rows * classes, &rng_);
  for (float& z : logits) z *= 5.0f;
  std::vector<int32_t> labels(rows);
  for (int r = 0; r < rows; ++r) labels[r] = (r * 3) % classes;
  std::vector<float> grad(rows * classes);
  XentStats cpu_stats;
  cpu_->SoftmaxCrossEntropy(rows, classes, logits.data(), labels.data(), 0.25f,
                            grad.data(), &cpu_stats);

  float* dlogits = Upload(logits);
  int32_t* dlabels = UploadLabels(labels);
  float* dgrad = Upload(std::vector<float>(rows * classes));
  absl::StatusOr<DeviceBuffer<XentStats>> dstats = gpu_->Allocate<XentStats>(1);
  ASSERT_TRUE(dstats.ok());
  XentStats gpu_stats;
  gpu_->SoftmaxCrossEntropy(rows, classes, dlogits, dlabels, 0.25f, dgrad,
                            dstats->data());
  gpu_->CopyToHost(dstats->data(), 1, &gpu_stats);
  ExpectClose(Download(dgrad, grad.size()), grad, 1e-5f);
  EXPECT_NEAR(gpu_stats.loss_sum, cpu_stats.loss_sum,
              1e-5 * cpu_stats.loss_sum);
  EXPECT_EQ(gpu_stats.correct, cpu_stats.correct);

  // Deterministic: a second run gives the same bits.
  XentStats again;
  gpu_->SoftmaxCrossEntropy(rows, classes, dlogits, dlabels, 0.25f, nullptr,
                            dstats->data());
  gpu_->CopyToHost(dstats->data(), 1, &again);
  ASSERT_TRUE(gpu_->Synchronize().ok());
  EXPECT_EQ(again.loss_sum, gpu_stats.loss_sum);
  EXPECT_EQ(again.correct, gpu_stats.correct);
}

TEST_F(CudaBackendTest, BadArgumentsReportedAtSynchronize) {
  float* d = Upload(std::vector<float>(16));
  gpu_->Gemm(Transpose::kNo, Transpose::kNo, 2, 2, 4, 1.0f, d, 3, d, 2, 0.0f, d,
             2);
  const absl::Status s = gpu_->Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("lda = 3"), std::string::npos) << s;
  EXPECT_TRUE(gpu_->Synchronize().ok());
}

TEST_F(CudaBackendTest, NoSuchGpuIsFailedPrecondition) {
  absl::StatusOr<std::unique_ptr<CudaBackend>> b =
      CudaBackend::Create(CudaBackend::DeviceCount());
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition);
}

// All visible GPUs (one is enough to run it): rank r holds r + 1 everywhere;
// after the all-reduce every rank holds sum(r + 1).
TEST_F(CudaBackendTest, GpuReducerSumsAcrossDevices) {
  const int count = CudaBackend::DeviceCount();
  std::vector<std::unique_ptr<CudaBackend>> gpus;
  std::vector<Backend*> raw;
  for (int i = 0; i < count; ++i) {
    absl::StatusOr<std::unique_ptr<CudaBackend>> g = CudaBackend::Create(i);
    ASSERT_TRUE(g.ok()) << g.status();
    raw.push_back(g->get());
    gpus.push_back(*std::move(g));
  }
  absl::StatusOr<std::unique_ptr<GpuReducer>> reducer = GpuReducer::Create(raw);
  ASSERT_TRUE(reducer.ok()) << reducer.status();
  const size_t n = 1000;
  const float want = count * (count + 1) / 2.0f;
  for (bool grouped : {true, false}) {
    std::vector<DeviceBuffer<float>> bufs;
    std::vector<float*> ptrs;
    for (int i = 0; i < count; ++i) {
      absl::StatusOr<DeviceBuffer<float>> b = gpus[i]->Allocate<float>(n);
      ASSERT_TRUE(b.ok());
      gpus[i]->Fill(n, i + 1.0f, b->data());
      ptrs.push_back(b->data());
      bufs.push_back(*std::move(b));
    }
    if (grouped) {
      ASSERT_TRUE((*reducer)->AllReduceSumAll(ptrs, n).ok());
    } else {
      std::vector<std::thread> threads;
      std::vector<absl::Status> status(count);
      for (int i = 0; i < count; ++i) {
        threads.emplace_back([&, i] {
          status[i] = (*reducer)->AllReduceSum(i, ptrs[i], n);
          if (status[i].ok()) {
            status[i] = (*reducer)->Wait(i, absl::Now() + absl::Seconds(60));
          }
        });
      }
      for (std::thread& t : threads) t.join();
      for (const absl::Status& s : status) ASSERT_TRUE(s.ok()) << s;
    }
    for (int i = 0; i < count; ++i) {
      std::vector<float> host(n);
      gpus[i]->CopyToHost(ptrs[i], n, host.data());
      ASSERT_TRUE(gpus[i]->Synchronize().ok());
      EXPECT_EQ(host, std::vector<float>(n, want)) << "rank " << i;
    }
  }
  float unused = 0;
  EXPECT_EQ((*reducer)->AllReduceSum(count, &unused, 1).code(),
            absl::StatusCode::kInvalidArgument);
}

// Rank 0 all-reduces, rank 1 never joins: rank 0's Wait gives up at its
// deadline instead of hanging, and its communicator stays aborted.
TEST_F(CudaBackendTest, GpuReducerWaitGivesUpWhenAPeerNeverJoins) {
  if (CudaBackend::DeviceCount() < 2) GTEST_SKIP() << "needs 2 GPUs";
  std::vector<std::unique_ptr<CudaBackend>> gpus;
  std::vector<Backend*> raw;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::unique_ptr<CudaBackend>> g = CudaBackend::Create(i);
    ASSERT_TRUE(g.ok()) << g.status();
    raw.push_back(g->get());
    gpus.push_back(*std::move(g));
  }
  absl::StatusOr<std::unique_ptr<GpuReducer>> reducer = GpuReducer::Create(raw);
  ASSERT_TRUE(reducer.ok()) << reducer.status();
  absl::StatusOr<DeviceBuffer<float>> buf = gpus[0]->Allocate<float>(1000);
  ASSERT_TRUE(buf.ok());
  gpus[0]->Fill(1000, 1.0f, buf->data());
  ASSERT_TRUE((*reducer)->AllReduceSum(0, buf->data(), 1000).ok());
  absl::Status s = (*reducer)->Wait(0, absl::Now() + absl::Milliseconds(500));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_EQ((*reducer)->AllReduceSum(0, buf->data(), 1000).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ps
