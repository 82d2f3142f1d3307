#include "worker/backend/cpu/kernel_timing.h"

#include <cblas.h>
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "oneapi/dnnl/dnnl.h"

namespace ps {
namespace cpu_internal {
namespace {

// The fastest of 5 calls: other processes' load only ever adds time, so the
// minimum is the steadiest estimate of what a kernel costs.
constexpr int kReps = 5;

std::vector<float> Random(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = u(rng);
  return v;
}

}  // namespace

double MinMs(const std::function<void()>& fn, int reps, int threads) {
  // One thread: the kernels run on this one, and its CPU time leaves out
  // what other processes take of the core (on a loaded machine wall time
  // can be several times the CPU time, and unevenly so between the
  // candidates). Several: their pools' threads work too, so wall time.
  const auto now = [threads] {
    if (threads == 1) {
      timespec ts;
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return 1e3 * ts.tv_sec + 1e-6 * ts.tv_nsec;
    }
    return std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  fn();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const double start = now();
    fn();
    ms.push_back(now() - start);
  }
  return *std::min_element(ms.begin(), ms.end());
}

absl::StatusOr<double> TimeConvStep(Backend* backend, DirectConv* conv,
                                    const DirectConvShape& s, int threads) {
  const int rows =
      s.tune_rows > 0 ? std::min(s.tune_rows, s.max_rows) : s.max_rows;
  const int pixels = rows * s.height * s.width;
  const int row_len = s.kernel * s.kernel * s.in_c;
  const ImageShape image{rows, s.height, s.width, s.in_c};
  std::vector<float> x = Random(static_cast<size_t>(pixels) * s.in_c, 1);
  std::vector<float> w = Random(static_cast<size_t>(row_len) * s.filters, 2);
  std::vector<float> b = Random(s.filters, 3);
  std::vector<float> dy = Random(static_cast<size_t>(pixels) * s.filters, 4);
  std::vector<float> y(dy.size()), dx(x.size()), dw(w.size()), db(b.size());
  if (conv != nullptr) {
    return MinMs(
        [&] {
          conv->Forward(rows, x.data(), w.data(), b.data(), y.data());
          conv->BackwardWeights(rows, x.data(), dy.data(), 0.0f, dw.data(),
                                db.data());
          if (s.input_grad) conv->BackwardData(rows, dy.data(), dx.data());
        },
        kReps, threads);
  }
  absl::StatusOr<DeviceBuffer<float>> cols =
      backend->Allocate<float>(static_cast<size_t>(pixels) * row_len);
  if (!cols.ok()) return cols.status();
  float* c = cols->data();
  return MinMs(
      [&] {
        backend->Im2Col(image, s.kernel, x.data(), c);
        backend->Gemm(Transpose::kNo, Transpose::kNo, pixels, s.filters,
                      row_len, 1.0f, c, row_len, w.data(), s.filters, 0.0f,
                      y.data(), s.filters);
        backend->BiasRelu(pixels, s.filters, b.data(), y.data());
        backend->Gemm(Transpose::kYes, Transpose::kNo, row_len, s.filters,
                      pixels, 1.0f, c, row_len, dy.data(), s.filters, 0.0f,
                      dw.data(), s.filters);
        backend->ColumnSums(pixels, s.filters, 1.0f, dy.data(), 0.0f,
                            db.data());
        if (!s.input_grad) return;
        backend->Gemm(Transpose::kNo, Transpose::kYes, pixels, row_len,
                      s.filters, 1.0f, dy.data(), s.filters, w.data(),
                      s.filters, 0.0f, c, row_len);
        backend->Col2Im(image, s.kernel, c, dx.data());
      },
      kReps, threads);
}

bool DnnlSgemm(Transpose trans_a, Transpose trans_b, int m, int n, int k,
               float alpha, const float* a, int lda, const float* b, int ldb,
               float beta, float* c, int ldc, int threads) {
  omp_set_num_threads(threads);
  return dnnl_sgemm(trans_a == Transpose::kYes ? 'T' : 'N',
                    trans_b == Transpose::kYes ? 'T' : 'N', m, n, k, alpha, a,
                    lda, b, ldb, beta, c, ldc) == dnnl_success;
}

std::pair<double, double> TimeGemms(Transpose trans_a, Transpose trans_b, int m,
                                    int n, int k, int threads) {
  const std::vector<float> a = Random(static_cast<size_t>(m) * k, 5);
  const std::vector<float> b = Random(static_cast<size_t>(k) * n, 6);
  std::vector<float> c(static_cast<size_t>(m) * n);
  const bool ta = trans_a == Transpose::kYes, tb = trans_b == Transpose::kYes;
  const int lda = ta ? m : k, ldb = tb ? k : n;
  const double blas = MinMs(
      [&] {
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                    tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a.data(),
                    lda, b.data(), ldb, 0.0f, c.data(), n);
      },
      kReps, threads);
  const double dnnl = MinMs(
      [&] {
        DnnlSgemm(trans_a, trans_b, m, n, k, 1.0f, a.data(), lda, b.data(), ldb,
                  0.0f, c.data(), n, threads);
      },
      kReps, threads);
  return {blas, dnnl};
}

}  // namespace cpu_internal
}  // namespace ps
