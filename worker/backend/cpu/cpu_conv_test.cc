// The CPU backend's convolution and pooling ops (Im2Col, Col2Im, MaxPool,
// MaxPoolBackward) against direct loops written from their definitions.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/backend/cpu/cpu_backend.h"
#include "worker/backend/elementwise.h"

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

// ---- The CPU loops give the bits of elementwise.h's gather definitions ----
// (which the CUDA kernels run one element per thread).

struct WindowCase {
  ImageShape shape;
  int kernel;  // conv kernel (odd)
  int pool;
};

class CpuMatchesElementwiseTest : public ::testing::TestWithParam<WindowCase> {
};

// Values of mixed magnitudes, so that a different summation order changes
// the bits, with exact ties, -0.0f and a NaN among them.
std::vector<float> Awkward(size_t n, std::mt19937* rng) {
  std::uniform_int_distribution<int> kind(0, 9);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> scale(-20, 20);
  std::vector<float> v(n);
  for (float& x : v) {
    const int k = kind(*rng);
    x = k == 0 ? 0.5f : k == 1 ? -0.0f : std::ldexp(u(*rng), scale(*rng));
  }
  if (n > 3) v[n / 3] = NAN;
  return v;
}

void ExpectBitwiseEqual(const std::vector<float>& got,
                        const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
        << "element " << i << ": " << got[i] << " vs " << want[i];
  }
}

TEST_P(CpuMatchesElementwiseTest, Im2ColAndCol2Im) {
  const WindowCase& p = GetParam();
  const ImageShape& s = p.shape;
  std::mt19937 rng(11);
  auto cpu = MakeBackend();
  const size_t pixels = static_cast<size_t>(s.batch) * s.height * s.width;
  const int row_len = p.kernel * p.kernel * s.channels;
  const std::vector<float> x = Awkward(pixels * s.channels, &rng);
  const std::vector<float> g = Awkward(pixels * row_len, &rng);
  std::vector<float> cols(g.size(), 7.0f), dx(x.size(), 7.0f);
  cpu->Im2Col(s, p.kernel, x.data(), cols.data());
  cpu->Col2Im(s, p.kernel, g.data(), dx.data());
  ASSERT_TRUE(cpu->Synchronize().ok());
  std::vector<float> want_cols(cols.size()), want_dx(dx.size());
  for (size_t r = 0; r < pixels; ++r) {
    for (int c = 0; c < row_len; ++c) {
      want_cols[r * row_len + c] =
          elementwise::Im2ColAt(s, p.kernel, x.data(), r, c);
    }
  }
  for (size_t e = 0; e < dx.size(); ++e) {
    want_dx[e] = elementwise::Col2ImAt(s, p.kernel, g.data(), e);
  }
  ExpectBitwiseEqual(cols, want_cols);
  ExpectBitwiseEqual(dx, want_dx);
}

TEST_P(CpuMatchesElementwiseTest, MaxPoolAndBackward) {
  const WindowCase& p = GetParam();
  const ImageShape& s = p.shape;
  std::mt19937 rng(12);
  auto cpu = MakeBackend();
  const size_t n =
      static_cast<size_t>(s.batch) * s.height * s.width * s.channels;
  const size_t pooled = static_cast<size_t>(s.batch) * (s.height / p.pool) *
                        (s.width / p.pool) * s.channels;
  const std::vector<float> x = Awkward(n, &rng);
  const std::vector<float> dy = Awkward(pooled, &rng);
  std::vector<float> y(pooled, 7.0f), dx(n, 7.0f);
  std::vector<int32_t> arg(pooled, 7);
  cpu->MaxPool(s, p.pool, x.data(), y.data(), arg.data());
  ASSERT_TRUE(cpu->Synchronize().ok());
  std::vector<float> want_y(pooled), want_dx(n);
  std::vector<int32_t> want_arg(pooled);
  for (size_t o = 0; o < pooled; ++o) {
    want_y[o] = elementwise::MaxPoolAt(s, p.pool, x.data(), o, &want_arg[o]);
  }
  ExpectBitwiseEqual(y, want_y);
  EXPECT_EQ(arg, want_arg);
  // Backward from argmaxes that include out-of-range positions, which
  // select nothing.
  if (pooled > 1) arg[pooled / 2] = -1;
  if (pooled > 2) arg[pooled / 2 + 1] = p.pool * p.pool;
  cpu->MaxPoolBackward(s, p.pool, arg.data(), dy.data(), dx.data());
  ASSERT_TRUE(cpu->Synchronize().ok());
  for (size_t e = 0; e < n; ++e) {
    want_dx[e] =
        elementwise::MaxPoolGradAt(s, p.pool, arg.data(), dy.data(), e);
  }
  ExpectBitwiseEqual(dx, want_dx);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CpuMatchesElementwiseTest,
    ::testing::Values(WindowCase{{2, 28, 28, 1}, 5, 2},   // conv1 / pool 1
                      WindowCase{{2, 14, 14, 32}, 5, 2},  // conv2 / pool 2
                      WindowCase{{3, 7, 5, 3}, 3, 2},     // partial windows
                      WindowCase{{1, 9, 8, 2}, 5, 3},     // pool 3, rows cut
                      WindowCase{{2, 4, 6, 5}, 1, 1},     // 1 x 1, pool 1
                      WindowCase{{1, 2, 3, 2}, 5, 2},     // kernel > image
                      WindowCase{{0, 3, 3, 2}, 3, 2}));   // empty batch

}  // namespace
}  // namespace ps
