// DnnlConv (oneDNN) against reference loops in double: forward (bias and
// ReLU), backward data, backward weights with beta 0 and 1, row counts
// below max_rows, bitwise repeatability across fresh objects, bad rows; and
// CpuBackend's kernel choice (CpuKernels, PrepareGemm, CreateDirectConv).
//
// Tolerance: oneDNN sums in another order than the reference, in float, so
// each output must lie within 1e-5 * (the sum of the absolute values of its
// terms) + 1e-6 of the double reference.

#include "worker/backend/cpu/dnnl_conv.h"

#include <cmath>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/backend/cpu/cpu_backend.h"

namespace ps {
namespace {

std::vector<float> Random(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = u(rng);
  return v;
}

// Reference sums: value and the sum of |terms| per output.
struct Ref {
  std::vector<double> value, magnitude;
};

// x NHWC, w [(c * k + i) * k + j][f]: each (n, y, x, f, c, i, j) term.
template <typename Visit>
void ForEachTerm(const DirectConvShape& s, int rows, Visit visit) {
  const int p = (s.kernel - 1) / 2;
  for (int n = 0; n < rows; ++n)
    for (int y = 0; y < s.height; ++y)
      for (int x = 0; x < s.width; ++x)
        for (int c = 0; c < s.in_c; ++c)
          for (int i = 0; i < s.kernel; ++i)
            for (int j = 0; j < s.kernel; ++j) {
              const int yy = y + i - p, xx = x + j - p;
              if (yy < 0 || yy >= s.height || xx < 0 || xx >= s.width) continue;
              const size_t in =
                  ((size_t(n) * s.height + yy) * s.width + xx) * s.in_c + c;
              const size_t out = (size_t(n) * s.height + y) * s.width + x;
              const size_t wrow = (size_t(c) * s.kernel + i) * s.kernel + j;
              for (int f = 0; f < s.filters; ++f) visit(in, out, wrow, f);
            }
}

void ExpectNear(const std::vector<float>& got, const Ref& want,
                const char* what) {
  ASSERT_EQ(got.size(), want.value.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want.value[i], 1e-5 * want.magnitude[i] + 1e-6)
        << what << " " << i;
  }
}

std::unique_ptr<DnnlConv> Make(const DirectConvShape& s, absl::Status* err) {
  absl::StatusOr<std::unique_ptr<DnnlConv>> c =
      DnnlConv::Create(s, 1, [err](absl::Status st) {
        if (err->ok()) *err = st;
      });
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

void CheckShape(const DirectConvShape& s, int rows) {
  SCOPED_TRACE(testing::Message()
               << s.height << "x" << s.width << "x" << s.in_c << " k"
               << s.kernel << " f" << s.filters << " rows " << rows);
  const size_t in_n = size_t(rows) * s.height * s.width * s.in_c;
  const size_t out_n = size_t(rows) * s.height * s.width * s.filters;
  const size_t w_n = size_t(s.kernel) * s.kernel * s.in_c * s.filters;
  const std::vector<float> x = Random(in_n, 1), w = Random(w_n, 2),
                           b = Random(s.filters, 3), dy = Random(out_n, 4);
  Ref y{std::vector<double>(out_n), std::vector<double>(out_n)};
  Ref dx{std::vector<double>(in_n), std::vector<double>(in_n)};
  Ref dw{std::vector<double>(w_n), std::vector<double>(w_n)};
  Ref db{std::vector<double>(s.filters), std::vector<double>(s.filters)};
  ForEachTerm(s, rows, [&](size_t in, size_t out, size_t wrow, int f) {
    const size_t o = out * s.filters + f, wi = wrow * s.filters + f;
    y.value[o] += double(x[in]) * w[wi];
    y.magnitude[o] += std::abs(double(x[in]) * w[wi]);
    dx.value[in] += double(dy[o]) * w[wi];
    dx.magnitude[in] += std::abs(double(dy[o]) * w[wi]);
    dw.value[wi] += double(dy[o]) * x[in];
    dw.magnitude[wi] += std::abs(double(dy[o]) * x[in]);
  });
  for (size_t o = 0; o < out_n; ++o) {
    const int f = o % s.filters;
    y.value[o] = std::max(0.0, y.value[o] + b[f]);
    y.magnitude[o] += std::abs(b[f]);
    db.value[f] += dy[o];
    db.magnitude[f] += std::abs(dy[o]);
  }
  absl::Status err;
  std::unique_ptr<DnnlConv> conv = Make(s, &err);
  ASSERT_NE(conv, nullptr);
  std::vector<float> got_y(out_n), got_dx(in_n), got_dw(w_n, 7.0f),
      got_db(s.filters, 7.0f);
  conv->Forward(rows, x.data(), w.data(), b.data(), got_y.data());
  conv->BackwardWeights(rows, x.data(), dy.data(), 0.0f, got_dw.data(),
                        got_db.data());
  conv->BackwardData(rows, dy.data(), got_dx.data());
  ASSERT_TRUE(err.ok()) << err;
  ExpectNear(got_y, y, "y");
  ExpectNear(got_dx, dx, "dx");
  ExpectNear(got_dw, dw, "dw");
  ExpectNear(got_db, db, "db");
  // beta 1 adds onto what is there: twice the gradient.
  conv->BackwardWeights(rows, x.data(), dy.data(), 1.0f, got_dw.data(),
                        got_db.data());
  for (Ref* r : {&dw, &db}) {
    for (size_t i = 0; i < r->value.size(); ++i) {
      r->value[i] *= 2;
      r->magnitude[i] *= 2;
    }
  }
  ExpectNear(got_dw, dw, "dw beta 1");
  ExpectNear(got_db, db, "db beta 1");
  ASSERT_TRUE(err.ok()) << err;
}

TEST(DnnlConvTest, MatchesReferenceLoops) {
  // The built-in CNN's first layer, channels > 1, odd sizes, kernel 1.
  CheckShape({4, 28, 28, 1, 32, 5, true}, 4);
  CheckShape({3, 7, 6, 3, 5, 3, true}, 3);
  CheckShape({2, 5, 9, 2, 3, 1, true}, 2);
}

TEST(DnnlConvTest, FewerRowsThanMaxRows) {
  CheckShape({8, 9, 8, 4, 6, 3, true}, 5);
  CheckShape({8, 9, 8, 4, 6, 3, true}, 1);
}

TEST(DnnlConvTest, FreshObjectsGiveTheSameBits) {
  const DirectConvShape s{6, 14, 14, 32, 64, 5, true};
  const std::vector<float> x = Random(6 * 14 * 14 * 32, 5),
                           w = Random(25 * 32 * 64, 6), b = Random(64, 7),
                           dy = Random(6 * 14 * 14 * 64, 8);
  std::vector<std::vector<float>> outs;
  for (int run = 0; run < 2; ++run) {
    absl::Status err;
    std::unique_ptr<DnnlConv> conv = Make(s, &err);
    ASSERT_NE(conv, nullptr);
    std::vector<float> y(dy.size()), dx(x.size()), dw(w.size()), db(64);
    conv->Forward(6, x.data(), w.data(), b.data(), y.data());
    conv->BackwardWeights(6, x.data(), dy.data(), 0.0f, dw.data(), db.data());
    conv->BackwardData(6, dy.data(), dx.data());
    ASSERT_TRUE(err.ok()) << err;
    for (auto* v : {&y, &dx, &dw, &db}) outs.push_back(*v);
  }
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(outs[i], outs[i + 4]) << i;
}

TEST(DnnlConvTest, BadRowsAndOrderAreRecorded) {
  absl::Status err;
  std::unique_ptr<DnnlConv> conv = Make({2, 4, 4, 1, 2, 3, true}, &err);
  ASSERT_NE(conv, nullptr);
  std::vector<float> buf(3 * 4 * 4 * 2);
  conv->BackwardData(2, buf.data(), buf.data());  // no Forward yet
  EXPECT_EQ(err.code(), absl::StatusCode::kFailedPrecondition) << err;
  err = absl::OkStatus();
  conv->Forward(3, buf.data(), buf.data(), buf.data(), buf.data());
  EXPECT_EQ(err.code(), absl::StatusCode::kInvalidArgument) << err;
  EXPECT_NE(err.message().find("rows"), std::string::npos) << err;
  EXPECT_FALSE(DnnlConv::Create({2, 4, 4, 1, 2, 2, true}, 1, nullptr).ok());
}

TEST(CpuKernelsTest, ParseAndNames) {
  for (CpuKernels k :
       {CpuKernels::kOpenBlas, CpuKernels::kOneDnn, CpuKernels::kAuto}) {
    absl::StatusOr<CpuKernels> p = ParseCpuKernels(CpuKernelsName(k));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, k);
  }
  absl::StatusOr<CpuKernels> bad = ParseCpuKernels("mkl");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("cpu_kernels"), std::string::npos);
}

// Each policy's choice, and oneDNN's sgemm against OpenBLAS's on the same
// shape (within 1e-5 of the sum of |terms|, as above).
TEST(CpuKernelsTest, PoliciesChooseAndGemmsAgree) {
  const DirectConvShape s{2, 6, 6, 2, 4, 3, true};
  const int m = 33, n = 17, k = 65;
  const std::vector<float> a = Random(m * k, 9), b = Random(k * n, 10);
  std::vector<std::vector<float>> c;
  for (CpuKernels kernels :
       {CpuKernels::kOpenBlas, CpuKernels::kOneDnn, CpuKernels::kAuto}) {
    SCOPED_TRACE(CpuKernelsName(kernels));
    absl::StatusOr<std::unique_ptr<CpuBackend>> cpu =
        CpuBackend::Create(0, 1, kernels);
    ASSERT_TRUE(cpu.ok());
    std::string choice;
    std::unique_ptr<DirectConv> conv = (*cpu)->CreateDirectConv(s, &choice);
    EXPECT_NE(choice.find("cpu:0 conv 6x6x2 k3 f4 rows 2: "), std::string::npos)
        << choice;
    const std::string gemm =
        (*cpu)->PrepareGemm(Transpose::kNo, Transpose::kYes, m, n, k);
    if (kernels == CpuKernels::kOpenBlas) {
      EXPECT_EQ(conv, nullptr);
      EXPECT_EQ(gemm, "");
    } else if (kernels == CpuKernels::kOneDnn) {
      EXPECT_NE(conv, nullptr);
      EXPECT_NE(gemm.find(": onednn"), std::string::npos) << gemm;
    } else {  // timed: either, with both times named
      EXPECT_NE(choice.find("ms, im2col+openblas"), std::string::npos);
      EXPECT_NE(gemm.find("openblas"), std::string::npos) << gemm;
    }
    c.emplace_back(m * n);
    (*cpu)->Gemm(Transpose::kNo, Transpose::kYes, m, n, k, 1.0f, a.data(), k,
                 b.data(), k, 0.0f, c.back().data(), n);
    ASSERT_TRUE((*cpu)->Synchronize().ok());
  }
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double mag = 0;
      for (int p = 0; p < k; ++p) mag += std::abs(a[i * k + p] * b[j * k + p]);
      ASSERT_NEAR(c[1][i * n + j], c[0][i * n + j], 1e-5 * mag)
          << i << "," << j;
    }
  }
}

// Under kAuto with a KernelChoices table: a shape's recorded choice is
// followed without timing, whichever it is, and a timed one is recorded, so
// a second backend (a replica, or the next run) takes the same kernels and
// computes the same bits.
TEST(CpuKernelsTest, AutoFollowsAndRecordsKernelChoices) {
  const DirectConvShape s{2, 6, 6, 2, 4, 3, true};
  const std::string prefix =
      absl::StrCat(CpuBackend::MachineKey(), " | threads 1 | ");
  const std::string conv_key = prefix + "conv 6x6x2 k3 f4 rows 2";
  const std::string gemm_key = prefix + "gemm NT m 33 n 17 k 65";
  for (const char* recorded : {"onednn", "openblas"}) {
    SCOPED_TRACE(recorded);
    KernelChoices choices;
    std::string warning;
    choices.Record(conv_key, recorded, &warning);
    choices.Record(gemm_key, recorded, &warning);
    absl::StatusOr<std::unique_ptr<CpuBackend>> cpu =
        CpuBackend::Create(0, 1, CpuKernels::kAuto, &choices);
    ASSERT_TRUE(cpu.ok());
    std::string choice;
    std::unique_ptr<DirectConv> conv = (*cpu)->CreateDirectConv(s, &choice);
    EXPECT_EQ(conv != nullptr, std::string(recorded) == "onednn") << choice;
    EXPECT_NE(choice.find("recorded in memory"), std::string::npos) << choice;
    EXPECT_EQ(choice.find(" ms"), std::string::npos) << choice;  // not timed
    const std::string gemm =
        (*cpu)->PrepareGemm(Transpose::kNo, Transpose::kYes, 33, 17, 65);
    EXPECT_NE(gemm.find(absl::StrCat(": ", recorded, " (recorded")),
              std::string::npos)
        << gemm;
  }

  KernelChoices shared;
  std::vector<std::string> accounts;
  std::vector<bool> direct;
  for (int replica = 0; replica < 2; ++replica) {
    absl::StatusOr<std::unique_ptr<CpuBackend>> cpu =
        CpuBackend::Create(replica, 1, CpuKernels::kAuto, &shared);
    ASSERT_TRUE(cpu.ok());
    std::string choice;
    direct.push_back((*cpu)->CreateDirectConv(s, &choice) != nullptr);
    accounts.push_back(choice);
  }
  EXPECT_NE(accounts[0].find(" ms"), std::string::npos) << accounts[0];
  EXPECT_NE(accounts[1].find("recorded in memory"), std::string::npos)
      << accounts[1];
  EXPECT_EQ(direct[0], direct[1]);
  EXPECT_THAT(
      shared.Find(conv_key),
      ::testing::Optional(std::string(direct[0] ? "onednn" : "openblas")));
}

}  // namespace
}  // namespace ps
