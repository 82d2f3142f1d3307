// The CPU backend's convolution and pooling ops (Im2Col, Col2Im, MaxPool,
// MaxPoolBackward) against direct loops written from their definitions.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/backend/cpu/cpu_backend.h"

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

size_t At(const ImageShape& s, int n, int y, int x, int c) {
  return ((static_cast<size_t>(n) * s.height + y) * s.width + x) * s.channels +
         c;
}

// A direct "same" convolution in double: out[n][y][x][f].
std::vector<double> DirectConv(const ImageShape& s, int k, int filters,
                               const std::vector<float>& x,
                               const std::vector<float>& w) {
  const int p = (k - 1) / 2;
  std::vector<double> out(
      static_cast<size_t>(s.batch) * s.height * s.width * filters, 0.0);
  for (int n = 0; n < s.batch; ++n)
    for (int y = 0; y < s.height; ++y)
      for (int px = 0; px < s.width; ++px)
        for (int f = 0; f < filters; ++f) {
          double sum = 0;
          for (int c = 0; c < s.channels; ++c)
            for (int i = 0; i < k; ++i)
              for (int j = 0; j < k; ++j) {
                const int iy = y + i - p, ix = px + j - p;
                if (iy < 0 || iy >= s.height || ix < 0 || ix >= s.width) {
                  continue;
                }
                sum += double{x[At(s, n, iy, ix, c)]} *
                       w[((c * k + i) * k + j) * filters + f];
              }
          out[((static_cast<size_t>(n) * s.height + y) * s.width + px) *
                  filters +
              f] = sum;
        }
  return out;
}

struct ConvCase {
  ImageShape shape;
  int kernel;
  int filters;
};

class CpuConvTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(CpuConvTest, Im2ColThenGemmIsTheConvolution) {
  const ConvCase& p = GetParam();
  const ImageShape& s = p.shape;
  std::mt19937 rng(3);
  auto cpu = MakeBackend();
  const int rows = s.batch * s.height * s.width;
  const int row_len = p.kernel * p.kernel * s.channels;
  const std::vector<float> x =
      RandomVector(static_cast<size_t>(rows) * s.channels, &rng);
  const std::vector<float> w =
      RandomVector(static_cast<size_t>(row_len) * p.filters, &rng);
  std::vector<float> cols(static_cast<size_t>(rows) * row_len, NAN);
  std::vector<float> out(static_cast<size_t>(rows) * p.filters);
  cpu->Im2Col(s, p.kernel, x.data(), cols.data());
  cpu->Gemm(Transpose::kNo, Transpose::kNo, rows, p.filters, row_len, 1.0f,
            cols.data(), row_len, w.data(), p.filters, 0.0f, out.data(),
            p.filters);
  ASSERT_TRUE(cpu->Synchronize().ok());
  const std::vector<double> want = DirectConv(s, p.kernel, p.filters, x, w);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_NEAR(out[i], want[i], 1e-4) << i;
  }
  // The same values as the per-element definition the GPU runs.
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
    for (int c = 0; c < row_len; ++c) {
      ASSERT_EQ(cols[r * row_len + c],
                elementwise::Im2ColAt(s, p.kernel, x.data(), r, c));
    }
  }
}

// Col2Im is Im2Col's adjoint: <Im2Col(x), g> == <x, Col2Im(g)>.
TEST_P(CpuConvTest, Col2ImIsTheAdjoint) {
  const ConvCase& p = GetParam();
  const ImageShape& s = p.shape;
  std::mt19937 rng(5);
  auto cpu = MakeBackend();
  const size_t pixels = static_cast<size_t>(s.batch) * s.height * s.width;
  const size_t row_len = static_cast<size_t>(p.kernel) * p.kernel * s.channels;
  const std::vector<float> x = RandomVector(pixels * s.channels, &rng);
  const std::vector<float> g = RandomVector(pixels * row_len, &rng);
  std::vector<float> cols(pixels * row_len);
  std::vector<float> dx(x.size(), NAN);
  cpu->Im2Col(s, p.kernel, x.data(), cols.data());
  cpu->Col2Im(s, p.kernel, g.data(), dx.data());
  ASSERT_TRUE(cpu->Synchronize().ok());
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < cols.size(); ++i) lhs += double{cols[i]} * g[i];
  for (size_t i = 0; i < x.size(); ++i) rhs += double{x[i]} * dx[i];
  EXPECT_NEAR(lhs, rhs, 1e-4 * (1 + std::abs(lhs)));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CpuConvTest,
    ::testing::Values(ConvCase{{2, 5, 4, 1}, 3, 2},    // MNIST-like, 1 channel
                      ConvCase{{1, 7, 7, 3}, 5, 4},    // channels, k = 5
                      ConvCase{{3, 4, 6, 2}, 1, 3},    // 1 x 1 kernel
                      ConvCase{{1, 2, 3, 2}, 5, 1}));  // kernel > image

TEST(CpuPoolTest, MaxPoolTakesTheFirstMaximumAndDropsPartialWindows) {
  auto cpu = MakeBackend();
  // One image 3 x 5 x 2 channels, pool 2: output 1 x 2 x 2.
  const ImageShape s{1, 3, 5, 2};
  std::vector<float> x(30);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7);
  x[At(s, 0, 0, 0, 0)] = 9;   // window (0, 0), channel 0: position 0
  x[At(s, 0, 1, 1, 0)] = 9;   // a tie later in the scan loses
  x[At(s, 0, 1, 2, 1)] = 8;   // window (0, 1), channel 1: position 2
  x[At(s, 0, 2, 0, 1)] = 99;  // the dropped third row is never read
  std::vector<float> y(4);
  std::vector<int32_t> arg(4, -7);
  cpu->MaxPool(s, 2, x.data(), y.data(), arg.data());
  ASSERT_TRUE(cpu->Synchronize().ok());
  EXPECT_EQ(y[0], 9);
  EXPECT_EQ(arg[0], 0);
  EXPECT_EQ(y[3], 8);
  EXPECT_EQ(arg[3], 2);
  for (int o = 0; o < 4; ++o) {  // y is the max of its window
    const int c = o % 2, ox = o / 2;
    float want = -1;
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        want = std::max(want, x[At(s, 0, i, ox * 2 + j, c)]);
    EXPECT_EQ(y[o], want) << o;
    const int a = arg[o];
    EXPECT_EQ(x[At(s, 0, a / 2, ox * 2 + a % 2, c)], want) << o;
  }

  const std::vector<float> dy = {1, 2, 3, 4};
  std::vector<float> dx(30, NAN);
  cpu->MaxPoolBackward(s, 2, arg.data(), dy.data(), dx.data());
  ASSERT_TRUE(cpu->Synchronize().ok());
  double total = 0;
  for (float v : dx) total += v;
  EXPECT_EQ(total, 10);  // each dy lands exactly once
  EXPECT_EQ(dx[At(s, 0, 0, 0, 0)], 1);
  EXPECT_EQ(dx[At(s, 0, 1, 1, 0)], 0);  // the losing tie
  EXPECT_EQ(dx[At(s, 0, 1, 2, 1)], 4);
  EXPECT_EQ(dx[At(s, 0, 2, 0, 1)], 0);  // outside every window
  EXPECT_EQ(dx[At(s, 0, 0, 4, 0)], 0);  // the dropped fifth column
}

TEST(CpuPoolTest, PoolOfOneCopies) {
  auto cpu = MakeBackend();
  std::mt19937 rng(1);
  const ImageShape s{2, 3, 3, 2};
  const std::vector<float> x = RandomVector(36, &rng);
  std::vector<float> y(36);
  std::vector<int32_t> arg(36);
  cpu->MaxPool(s, 1, x.data(), y.data(), arg.data());
  ASSERT_TRUE(cpu->Synchronize().ok());
  EXPECT_EQ(y, x);
}

TEST(CpuConvTest, BadArgumentsAreReportedBySynchronize) {
  auto cpu = MakeBackend();
  std::vector<float> a(64), b(64 * 9);
  std::vector<int32_t> arg(64);
  struct Case {
    std::function<void()> call;
    const char* message;
  };
  const Case cases[] = {
      {[&] {
         cpu->Im2Col({1, 4, 4, 1}, 2, a.data(), b.data());
       },
       "Im2Col: kernel = 2 (must be odd, >= 1)"},
      {[&] {
         cpu->Col2Im({1, -4, 4, 1}, 3, b.data(), a.data());
       },
       "Col2Im: height = -4"},
      {[&] {
         cpu->Im2Col({1, 4, 4, 1}, 3, nullptr, b.data());
       },
       "Im2Col: null pointer"},
      {[&] {
         cpu->MaxPool({1, 4, 4, 1}, 0, a.data(), b.data(), arg.data());
       },
       "MaxPool: pool = 0 (must be >= 1)"},
      {[&] {
         cpu->MaxPoolBackward({1, 4, 4, 1}, 2, nullptr, a.data(), b.data());
       },
       "MaxPoolBackward: null pointer"},
      {[&] {
         cpu->Im2Col({1 << 16, 1 << 8, 1 << 8, 1}, 3, a.data(), b.data());
       },
       "overflows"},
  };
  for (const Case& c : cases) {
    c.call();
    const absl::Status s = cpu->Synchronize();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace ps
