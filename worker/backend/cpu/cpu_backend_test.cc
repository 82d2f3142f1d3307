#include "worker/backend/cpu/cpu_backend.h"

#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

std::vector<float> RandomVector(size_t n, std::mt19937* rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

std::unique_ptr<CpuBackend> MakeBackend() {
  absl::StatusOr<std::unique_ptr<CpuBackend>> b = CpuBackend::Create(0, 1);
  EXPECT_TRUE(b.ok()) << b.status();
  return *std::move(b);
}

// Row-major reference in double.
void ReferenceGemm(Transpose ta, Transpose tb, int m, int n, int k, float alpha,
                   const std::vector<float>& a, int lda,
                   const std::vector<float>& b, int ldb, float beta,
                   std::vector<float>* c, int ldc) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0;
      for (int p = 0; p < k; ++p) {
        const float av = ta == Transpose::kNo ? a[i * lda + p] : a[p * lda + i];
        const float bv = tb == Transpose::kNo ? b[p * ldb + j] : b[j * ldb + p];
        sum += static_cast<double>(av) * bv;
      }
      float& cv = (*c)[i * ldc + j];
      cv = static_cast<float>(alpha * sum + (beta == 0 ? 0.0 : beta * cv));
    }
  }
}

struct GemmCase {
  Transpose ta, tb;
  int m, n, k;
  float alpha, beta;
  int pad;  // extra leading-dimension padding on every operand
};

class CpuGemmTest : public ::testing::TestWithParam<GemmCase> {};

TEST_P(CpuGemmTest, MatchesReference) {
  const GemmCase& p = GetParam();
  std::mt19937 rng(7);
  const int a_rows = p.ta == Transpose::kNo ? p.m : p.k;
  const int a_cols = p.ta == Transpose::kNo ? p.k : p.m;
  const int b_rows = p.tb == Transpose::kNo ? p.k : p.n;
  const int b_cols = p.tb == Transpose::kNo ? p.n : p.k;
  const int lda = std::max(1, a_cols + p.pad);
  const int ldb = std::max(1, b_cols + p.pad);
  const int ldc = std::max(1, p.n + p.pad);
  std::vector<float> a = RandomVector(a_rows * lda, &rng);
  std::vector<float> b = RandomVector(b_rows * ldb, &rng);
  std::vector<float> c = RandomVector(p.m * ldc, &rng);
  std::vector<float> want = c;
  ReferenceGemm(p.ta, p.tb, p.m, p.n, p.k, p.alpha, a, lda, b, ldb, p.beta,
                &want, ldc);
  auto backend = MakeBackend();
  backend->Gemm(p.ta, p.tb, p.m, p.n, p.k, p.alpha, a.data(), lda, b.data(),
                ldb, p.beta, c.data(), ldc);
  ASSERT_TRUE(backend->Synchronize().ok());
  for (size_t i = 0; i < c.size(); ++i) {
    EXPECT_NEAR(c[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CpuGemmTest,
    ::testing::Values(
        GemmCase{Transpose::kNo, Transpose::kNo, 5, 7, 3, 1.0f, 0.0f, 0},
        GemmCase{Transpose::kYes, Transpose::kNo, 5, 7, 3, 1.0f, 0.0f, 0},
        GemmCase{Transpose::kNo, Transpose::kYes, 5, 7, 3, 1.0f, 0.0f, 0},
        GemmCase{Transpose::kYes, Transpose::kYes, 5, 7, 3, 1.0f, 0.0f, 0},
        GemmCase{Transpose::kNo, Transpose::kNo, 33, 17, 65, 0.5f, 1.0f, 3},
        GemmCase{Transpose::kYes, Transpose::kNo, 64, 10, 128, 1.0f, 1.0f, 0},
        GemmCase{Transpose::kNo, Transpose::kYes, 64, 128, 10, -2.0f, 0.25f, 1},
        GemmCase{Transpose::kYes, Transpose::kYes, 9, 4, 11, 1.5f, -1.0f, 2},
        // k == 0 scales C by beta; m or n == 0 touches nothing.
        GemmCase{Transpose::kNo, Transpose::kNo, 4, 3, 0, 1.0f, 0.5f, 0},
        GemmCase{Transpose::kNo, Transpose::kNo, 4, 3, 0, 1.0f, 0.0f, 0},
        GemmCase{Transpose::kNo, Transpose::kNo, 0, 3, 4, 1.0f, 0.0f, 0},
        GemmCase{Transpose::kNo, Transpose::kNo, 4, 0, 4, 1.0f, 0.0f, 0}));

TEST(CpuBackendTest, GemmBetaZeroIgnoresNaNInC) {
  auto backend = MakeBackend();
  const float a[2] = {1.0f, 2.0f};  // 1x2
  const float b[2] = {3.0f, 4.0f};  // 2x1
  float c[1] = {NAN};
  backend->Gemm(Transpose::kNo, Transpose::kNo, 1, 1, 2, 1.0f, a, 2, b, 1, 0.0f,
                c, 1);
  ASSERT_TRUE(backend->Synchronize().ok());
  EXPECT_EQ(c[0], 11.0f);
}

struct BadGemm {
  std::string name;
  int m, n, k, lda, ldb, ldc;
  std::string want;
};

TEST(CpuBackendTest, BadGemmArgumentsAreReportedBySynchronize) {
  const std::vector<BadGemm> cases = {
      {"negative m", -1, 2, 2, 2, 2, 2, "m = -1"},
      {"negative k", 2, 2, -3, 2, 2, 2, "k = -3"},
      {"small lda", 2, 2, 4, 3, 2, 2, "lda = 3"},
      {"small ldb", 2, 5, 2, 2, 4, 5, "ldb = 4"},
      {"small ldc", 2, 5, 2, 2, 5, 1, "ldc = 1"},
  };
  std::vector<float> buf(64, 1.0f);
  for (const BadGemm& c : cases) {
    auto backend = MakeBackend();
    std::vector<float> out = buf;
    backend->Gemm(Transpose::kNo, Transpose::kNo, c.m, c.n, c.k, 1.0f,
                  buf.data(), c.lda, buf.data(), c.ldb, 0.0f, out.data(),
                  c.ldc);
    const absl::Status s = backend->Synchronize();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(s.message().find(c.want), std::string::npos) << s;
    EXPECT_EQ(out, buf) << c.name << ": a rejected call must not run";
    EXPECT_TRUE(backend->Synchronize().ok()) << "error is cleared once read";
  }
}

TEST(CpuBackendTest, FirstErrorWins) {
  auto backend = MakeBackend();
  float x[4] = {};
  backend->BiasAdd(-1, 2, x, x);
  backend->ColumnSums(2, -5, 1.0f, x, 0.0f, x);
  const absl::Status s = backend->Synchronize();
  EXPECT_NE(s.message().find("BiasAdd: rows = -1"), std::string::npos) << s;
}

TEST(CpuBackendTest, BiasAddAndBiasRelu) {
  auto backend = MakeBackend();
  std::mt19937 rng(1);
  const int rows = 7, cols = 19;
  std::vector<float> x = RandomVector(rows * cols, &rng);
  std::vector<float> bias = RandomVector(cols, &rng);
  std::vector<float> added = x, fused = x;
  backend->BiasAdd(rows, cols, bias.data(), added.data());
  backend->BiasRelu(rows, cols, bias.data(), fused.data());
  ASSERT_TRUE(backend->Synchronize().ok());
  int zeros = 0;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const float want = x[r * cols + c] + bias[c];
      EXPECT_EQ(added[r * cols + c], want);
      EXPECT_EQ(fused[r * cols + c], want > 0 ? want : 0.0f);
      zeros += want <= 0;
    }
  }
  EXPECT_GT(zeros, 0);  // the ReLU was exercised on both sides
  EXPECT_LT(zeros, rows * cols);
}

TEST(CpuBackendTest, ReluAndBackward) {
  auto backend = MakeBackend();
  std::mt19937 rng(2);
  const size_t n = 1001;
  std::vector<float> x = RandomVector(n, &rng);
  std::vector<float> dy = RandomVector(n, &rng);
  std::vector<float> y(n), dx(n);
  backend->Relu(n, x.data(), y.data());
  backend->ReluBackward(n, y.data(), dy.data(), dx.data());
  // In place, as the models use it.
  std::vector<float> in_place = dy;
  backend->ReluBackward(n, y.data(), in_place.data(), in_place.data());
  ASSERT_TRUE(backend->Synchronize().ok());
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(y[i], x[i] > 0 ? x[i] : 0.0f);
    EXPECT_EQ(dx[i], x[i] > 0 ? dy[i] : 0.0f);
    EXPECT_EQ(in_place[i], dx[i]);
  }
}

TEST(CpuBackendTest, SoftmaxCrossEntropy) {
  auto backend = MakeBackend();
  std::mt19937 rng(3);
  const int rows = 50, classes = 10;
  std::vector<float> logits = RandomVector(rows * classes, &rng);
  for (float& z : logits) z *= 4.0f;
  std::vector<int32_t> labels(rows);
  for (int r = 0; r < rows; ++r) labels[r] = (r * 7) % classes;
  std::vector<float> grad(rows * classes);
  XentStats stats{-1.0, -1};
  backend->SoftmaxCrossEntropy(rows, classes, logits.data(), labels.data(),
                               0.5f, grad.data(), &stats);
  ASSERT_TRUE(backend->Synchronize().ok());
  double want_loss = 0;
  int64_t want_correct = 0;
  for (int r = 0; r < rows; ++r) {
    const float* z = &logits[r * classes];
    int arg = 0;
    double sum = 0;
    for (int c = 0; c < classes; ++c) {
      if (z[c] > z[arg]) arg = c;
    }
    for (int c = 0; c < classes; ++c) sum += std::exp(z[c] - z[arg]);
    want_loss += std::log(sum) - (z[labels[r]] - z[arg]);
    want_correct += arg == labels[r];
    for (int c = 0; c < classes; ++c) {
      const double g =
          std::exp(z[c] - z[arg]) / sum - (c == labels[r] ? 1.0 : 0.0);
      EXPECT_NEAR(grad[r * classes + c], 0.5 * g, 1e-6);
    }
  }
  EXPECT_NEAR(stats.loss_sum, want_loss, 1e-5 * want_loss);
  EXPECT_EQ(stats.correct, want_correct);
  EXPECT_GT(want_correct, 0);

  // Zero rows: a valid empty batch.
  backend->SoftmaxCrossEntropy(0, classes, nullptr, nullptr, 1.0f, nullptr,
                               &stats);
  ASSERT_TRUE(backend->Synchronize().ok());
  EXPECT_EQ(stats.loss_sum, 0.0);
  EXPECT_EQ(stats.correct, 0);
}

TEST(CpuBackendTest, ColumnSums) {
  auto backend = MakeBackend();
  std::mt19937 rng(4);
  // 600 columns cross the internal block of 512.
  for (int cols : {1, 10, 600}) {
    const int rows = 37;
    std::vector<float> x = RandomVector(rows * cols, &rng);
    std::vector<float> y0 = RandomVector(cols, &rng);
    for (auto [alpha, beta] :
         std::vector<std::pair<float, float>>{{1, 0}, {0.5f, 1}, {2, -0.5f}}) {
      std::vector<float> y = y0;
      backend->ColumnSums(rows, cols, alpha, x.data(), beta, y.data());
      ASSERT_TRUE(backend->Synchronize().ok());
      for (int c = 0; c < cols; ++c) {
        double sum = 0;
        for (int r = 0; r < rows; ++r) sum += x[r * cols + c];
        const double want = alpha * sum + beta * y0[c];
        EXPECT_NEAR(y[c], want, 1e-5 * (1 + std::abs(want)))
            << cols << " " << c;
      }
    }
  }
}

TEST(CpuBackendTest, AxpyScaleFillAndCopies) {
  auto backend = MakeBackend();
  absl::StatusOr<DeviceBuffer<float>> x = backend->Allocate<float>(5);
  absl::StatusOr<DeviceBuffer<float>> y = backend->Allocate<float>(5);
  absl::StatusOr<HostBuffer<float>> h = backend->AllocateHost<float>(5);
  ASSERT_TRUE(x.ok() && y.ok() && h.ok());
  EXPECT_EQ(x->size(), 5u);
  const float host[5] = {1, 2, 3, 4, 5};
  backend->CopyToDevice(host, 5, x->data());
  backend->Fill(5, 1.0f, y->data());
  backend->Axpy(5, 2.0f, x->data(), y->data());  // 3 5 7 9 11
  backend->Scale(5, 0.5f, y->data());            // 1.5 2.5 3.5 4.5 5.5
  backend->CopyOnDevice(y->data(), 2, x->data());
  backend->CopyToHost(x->data(), 5, h->data());
  ASSERT_TRUE(backend->Synchronize().ok());
  const std::vector<float> got(h->data(), h->data() + 5);
  EXPECT_EQ(got, (std::vector<float>{1.5f, 2.5f, 3, 4, 5}));
}

TEST(CpuBackendTest, BuffersMoveAndEmptyAllocations) {
  auto backend = MakeBackend();
  absl::StatusOr<DeviceBuffer<int32_t>> empty = backend->Allocate<int32_t>(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  EXPECT_EQ(empty->data(), nullptr);
  absl::StatusOr<DeviceBuffer<XentStats>> a = backend->Allocate<XentStats>(3);
  ASSERT_TRUE(a.ok());
  XentStats* p = a->data();
  DeviceBuffer<XentStats> b = *std::move(a);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.size(), 3u);
  b.reset();
  EXPECT_TRUE(b.empty());
}

TEST(CpuBackendTest, AllocationFailureIsResourceExhausted) {
  auto backend = MakeBackend();
  // More than any address space: aligned_alloc fails without touching pages.
  absl::StatusOr<DeviceBuffer<float>> huge =
      backend->Allocate<float>(size_t{1} << 61);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(CpuBackendTest, CreateValidatesArguments) {
  EXPECT_EQ(CpuBackend::Create(-1, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CpuBackend::Create(0, -2).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(CpuBackend::Create(0, 2).ok());
  EXPECT_EQ(CpuBackend::BlasThreads(), 2);
  ASSERT_TRUE(CpuBackend::Create(1, 0).ok());  // 0 leaves the count alone
  EXPECT_EQ(CpuBackend::BlasThreads(), 2);
  ASSERT_TRUE(CpuBackend::Create(0, 1).ok());
  EXPECT_EQ(CpuBackend::BlasThreads(), 1);
}

// K replicas, one thread each, as the trainer runs them: results equal the
// single-threaded ones, whatever the OpenBLAS thread count.
TEST(CpuBackendTest, ConcurrentBackendsAgreeWithSequential) {
  for (int blas_threads : {1, 2}) {
    constexpr int kReplicas = 3;
    const int m = 96, n = 80, k = 200;
    std::mt19937 rng(5);
    std::vector<std::vector<float>> a, b, sequential, concurrent;
    std::vector<std::unique_ptr<CpuBackend>> backends;
    for (int r = 0; r < kReplicas; ++r) {
      a.push_back(RandomVector(m * k, &rng));
      b.push_back(RandomVector(k * n, &rng));
      sequential.emplace_back(m * n);
      concurrent.emplace_back(m * n);
      absl::StatusOr<std::unique_ptr<CpuBackend>> be =
          CpuBackend::Create(r, blas_threads);
      ASSERT_TRUE(be.ok());
      backends.push_back(*std::move(be));
    }
    auto run = [&](int r, std::vector<float>* out) {
      for (int rep = 0; rep < 20; ++rep) {
        backends[r]->Gemm(Transpose::kNo, Transpose::kNo, m, n, k, 1.0f,
                          a[r].data(), k, b[r].data(), n, 0.0f, out->data(), n);
      }
    };
    for (int r = 0; r < kReplicas; ++r) run(r, &sequential[r]);
    std::vector<std::thread> threads;
    for (int r = 0; r < kReplicas; ++r) {
      threads.emplace_back(run, r, &concurrent[r]);
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < kReplicas; ++r) {
      ASSERT_TRUE(backends[r]->Synchronize().ok());
      EXPECT_EQ(concurrent[r], sequential[r])
          << "replica " << r << ", blas_threads " << blas_threads;
    }
  }
}

TEST(CpuBackendTest, BlasCoreAdviceNamesTheKernelsToSet) {
  // The case that cost 3-4x: OpenBLAS 0.3.21 on Sapphire Rapids.
  const std::string advice =
      CpuBackend::BlasCoreAdviceFor("Prescott", true, true);
  EXPECT_NE(advice.find("\"Prescott\""), std::string::npos) << advice;
  EXPECT_NE(advice.find("OPENBLAS_CORETYPE=SkylakeX"), std::string::npos)
      << advice;
  EXPECT_NE(CpuBackend::BlasCoreAdviceFor("Haswell", true, true)
                .find("OPENBLAS_CORETYPE=SkylakeX"),
            std::string::npos);
  EXPECT_NE(CpuBackend::BlasCoreAdviceFor("Sandybridge", true, false)
                .find("OPENBLAS_CORETYPE=Haswell"),
            std::string::npos);
  // Kernels that use the CPU's widest unit, or a CPU without AVX2.
  EXPECT_EQ(CpuBackend::BlasCoreAdviceFor("SkylakeX", true, true), "");
  EXPECT_EQ(CpuBackend::BlasCoreAdviceFor("COOPERLAKE", true, true), "");
  EXPECT_EQ(CpuBackend::BlasCoreAdviceFor("Zen", true, false), "");
  EXPECT_EQ(CpuBackend::BlasCoreAdviceFor("Prescott", false, false), "");
  EXPECT_EQ(CpuBackend::BlasCoreToSetFor("Prescott", true, true), "SkylakeX");
  EXPECT_EQ(CpuBackend::BlasCoreToSetFor("Sandybridge", true, false),
            "Haswell");
  EXPECT_EQ(CpuBackend::BlasCoreToSetFor("Zen", true, false), "");
  // This process: whatever OpenBLAS chose, it has a name.
  EXPECT_FALSE(CpuBackend::BlasCore().empty());
}

}  // namespace
}  // namespace ps
