#include "worker/backend/cpu/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "oneapi/dnnl/dnnl.h"
#include "worker/backend/arg_checks.h"
#include "worker/backend/cpu/conv_loops.h"
#include "worker/backend/cpu/dnnl_conv.h"
#include "worker/backend/cpu/embedding_loops.h"
#include "worker/backend/cpu/kernel_timing.h"
#include "worker/backend/elementwise.h"

// OpenBLAS's thread-count controls. <cblas.h> from OpenBLAS declares them too;
// declaring them here keeps this file building against a CBLAS header that
// does not (the symbols come from libopenblas either way).
extern "C" void openblas_set_num_threads(int);
extern "C" int openblas_get_num_threads(void);
extern "C" char* openblas_get_corename(void);

namespace ps {
namespace {

// Cache-line alignment lets the compiler's vector loops and OpenBLAS's
// kernels use aligned loads.
constexpr size_t kAlignment = 64;

// kAuto takes oneDNN's kernel only when it needs less than this fraction of
// the OpenBLAS path's time.
constexpr double kSwitchMargin = 0.9;

void* AlignedAlloc(size_t bytes) {
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  return std::aligned_alloc(kAlignment, rounded);
}

CBLAS_TRANSPOSE ToCblas(Transpose t) {
  return t == Transpose::kNo ? CblasNoTrans : CblasTrans;
}

std::string ConvName(const DirectConvShape& s) {
  return absl::StrCat("conv ", s.height, "x", s.width, "x", s.in_c, " k",
                      s.kernel, " f", s.filters, " rows ",
                      s.tune_rows > 0 ? s.tune_rows : s.max_rows);
}

}  // namespace

const char* CpuKernelsName(CpuKernels kernels) {
  switch (kernels) {
    case CpuKernels::kOpenBlas:
      return "openblas";
    case CpuKernels::kOneDnn:
      return "onednn";
    case CpuKernels::kAuto:
      return "auto";
  }
  return "?";
}

absl::StatusOr<CpuKernels> ParseCpuKernels(absl::string_view name) {
  for (CpuKernels k :
       {CpuKernels::kOpenBlas, CpuKernels::kOneDnn, CpuKernels::kAuto}) {
    if (name == CpuKernelsName(k)) return k;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("cpu_kernels: must be \"auto\", \"onednn\" or "
                   "\"openblas\", got \"",
                   name, "\""));
}

absl::StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(
    int index, int blas_threads, CpuKernels kernels, KernelChoices* choices) {
  if (index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu device index must be >= 0, got ", index));
  }
  if (blas_threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu_threads must be >= 0, got ", blas_threads));
  }
  if (blas_threads > 0) openblas_set_num_threads(blas_threads);
  const int threads = std::max(1, openblas_get_num_threads());
  return std::unique_ptr<CpuBackend>(
      new CpuBackend(absl::StrCat("cpu:", index), kernels, threads, choices));
}

std::string CpuBackend::MachineKey() {
  static const std::string* const key = new std::string([] {
    std::string model = "unknown CPU";
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line;
    while (std::getline(cpuinfo, line)) {
      if (!absl::StartsWith(line, "model name")) continue;
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        model = std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      }
      break;
    }
    std::replace(model.begin(), model.end(), '\t', ' ');
    const dnnl_version_t* v = dnnl_version();
    return absl::StrCat(model, " | openblas ", BlasCore(), " | onednn ",
                        v->major, ".", v->minor, ".", v->patch);
  }());
  return *key;
}

bool CpuBackend::AutoPicksOneDnn(
    const std::string& shape, const std::function<bool(std::string*)>& time_it,
    std::string* note) {
  const std::string key =
      absl::StrCat(MachineKey(), " | threads ", threads_, " | ", shape);
  if (choices_ != nullptr) {
    if (std::optional<std::string> recorded = choices_->Find(key)) {
      absl::StrAppend(note, "recorded in ",
                      choices_->path().empty() ? "memory" : choices_->path());
      return *recorded == "onednn";
    }
  }
  const bool onednn = time_it(note);
  if (choices_ == nullptr) return onednn;
  std::string warning;
  const std::string use =
      choices_->Record(key, onednn ? "onednn" : "openblas", &warning);
  if (!warning.empty()) absl::StrAppend(note, "; ", warning);
  if ((use == "onednn") != onednn) {
    absl::StrAppend(note, "; ", use, " recorded first by another process");
  }
  return use == "onednn";
}

int CpuBackend::BlasThreads() { return openblas_get_num_threads(); }

std::string CpuBackend::BlasCore() {
  const char* name = openblas_get_corename();
  return name == nullptr ? "" : name;
}

std::string CpuBackend::BlasCoreAdvice() {
  return BlasCoreAdviceFor(BlasCore(), __builtin_cpu_supports("avx2"),
                           __builtin_cpu_supports("avx512f"));
}

std::string CpuBackend::BlasCoreToSet() {
  return BlasCoreToSetFor(BlasCore(), __builtin_cpu_supports("avx2"),
                          __builtin_cpu_supports("avx512f"));
}

std::string CpuBackend::BlasCoreToSetFor(absl::string_view core, bool cpu_avx2,
                                         bool cpu_avx512) {
  // OpenBLAS's x86-64 kernel sets with AVX-512 and with AVX2 sgemm kernels.
  constexpr absl::string_view kAvx512[] = {"skylakex", "cooperlake",
                                           "sapphirerapids"};
  constexpr absl::string_view kAvx2[] = {"haswell", "zen", "excavator"};
  const std::string name = absl::AsciiStrToLower(core);
  auto in = [&name](const auto& list) {
    return std::find(std::begin(list), std::end(list), name) != std::end(list);
  };
  const char* want = nullptr;
  if (cpu_avx512 && !in(kAvx512)) {
    want = "SkylakeX";
  } else if (cpu_avx2 && !cpu_avx512 && !in(kAvx2) && !in(kAvx512)) {
    want = "Haswell";
  }
  return want == nullptr ? "" : want;
}

std::string CpuBackend::BlasCoreAdviceFor(absl::string_view core, bool cpu_avx2,
                                          bool cpu_avx512) {
  const std::string want = BlasCoreToSetFor(core, cpu_avx2, cpu_avx512);
  if (want.empty()) return "";
  return absl::StrCat("OpenBLAS runs its \"", core,
                      "\" kernels although this CPU has ",
                      cpu_avx512 ? "AVX-512" : "AVX2",
                      ": sgemm is several times slower than it could be; set "
                      "OPENBLAS_CORETYPE=",
                      want, " in the environment that starts this process");
}

void CpuBackend::Record(absl::Status status) {
  if (error_.ok()) error_ = std::move(status);
}

void CpuBackend::Gemm(Transpose trans_a, Transpose trans_b, int m, int n, int k,
                      float alpha, const float* a, int lda, const float* b,
                      int ldb, float beta, float* c, int ldc) {
  absl::Status s =
      CheckGemmArgs(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
  if (!s.ok()) return Record(std::move(s));
  if (m == 0 || n == 0) return;
  if (k == 0) {
    // C = beta * C; BLAS implementations differ on k == 0, so do it here.
    for (int i = 0; i < m; ++i) {
      float* row = c + static_cast<size_t>(i) * ldc;
      for (int j = 0; j < n; ++j) row[j] = beta == 0.0f ? 0.0f : beta * row[j];
    }
    return;
  }
  if (!dnnl_gemms_.empty() &&
      dnnl_gemms_.count(KeyOf(trans_a, trans_b, m, n, k)) > 0) {
    if (!cpu_internal::DnnlSgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b,
                                 ldb, beta, c, ldc, threads_)) {
      Record(absl::InternalError("Gemm: oneDNN's sgemm failed"));
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, ToCblas(trans_a), ToCblas(trans_b), m, n, k, alpha,
              a, lda, b, ldb, beta, c, ldc);
}

CpuBackend::GemmKey CpuBackend::KeyOf(Transpose trans_a, Transpose trans_b,
                                      int m, int n, int k) {
  const bool ta = trans_a == Transpose::kYes;
  return {ta, trans_b == Transpose::kYes, ta ? m : k, n};
}

std::unique_ptr<DirectConv> CpuBackend::CreateDirectConv(
    const DirectConvShape& shape, std::string* choice) {
  std::string note;
  std::unique_ptr<DirectConv> chosen;
  if (kernels_ == CpuKernels::kOpenBlas) {
    note = "im2col+openblas (cpu_kernels openblas)";
  } else {
    absl::StatusOr<std::unique_ptr<DnnlConv>> dnnl = DnnlConv::Create(
        shape, threads_, [this](absl::Status s) { Record(std::move(s)); });
    if (!dnnl.ok()) {
      note = absl::StrCat(
          "im2col+openblas (oneDNN has none: ", dnnl.status().message(), ")");
    } else if (kernels_ == CpuKernels::kOneDnn) {
      note = absl::StrCat("onednn (cpu_kernels onednn; ", (*dnnl)->ImplNames(),
                          ")");
      chosen = *std::move(dnnl);
    } else {
      DirectConv* conv = dnnl->get();
      std::string how;
      const bool use = AutoPicksOneDnn(
          ConvName(shape),
          [&](std::string* timing) {
            absl::StatusOr<double> ms_dnnl =
                cpu_internal::TimeConvStep(this, conv, shape, threads_);
            absl::StatusOr<double> ms_blas =
                cpu_internal::TimeConvStep(this, nullptr, shape, threads_);
            absl::StrAppendFormat(
                timing, "fwd+bwd: onednn %.2f ms, im2col+openblas %.2f ms",
                ms_dnnl.value_or(-1), ms_blas.value_or(-1));
            return ms_dnnl.ok() &&
                   (!ms_blas.ok() || *ms_dnnl < kSwitchMargin * *ms_blas);
          },
          &how);
      note = absl::StrCat(use ? "onednn" : "im2col+openblas", " (", how, "; ",
                          (*dnnl)->ImplNames(), ")");
      if (use) chosen = *std::move(dnnl);
    }
  }
  if (choice != nullptr) {
    *choice = absl::StrCat(device_, " ", ConvName(shape), ": ", note);
  }
  return chosen;
}

std::string CpuBackend::PrepareGemm(Transpose trans_a, Transpose trans_b, int m,
                                    int n, int k) {
  if (kernels_ == CpuKernels::kOpenBlas || m < 1 || n < 1 || k < 1) return "";
  const bool ta = trans_a == Transpose::kYes, tb = trans_b == Transpose::kYes;
  const std::string shape = absl::StrCat(
      "gemm ", ta ? "T" : "N", tb ? "T" : "N", " m ", m, " n ", n, " k ", k);
  const std::string name = absl::StrCat(device_, " ", shape, ": ");
  if (kernels_ == CpuKernels::kOneDnn) {
    dnnl_gemms_.insert(KeyOf(trans_a, trans_b, m, n, k));
    return name + "onednn (cpu_kernels onednn)";
  }
  std::string how;
  const bool use = AutoPicksOneDnn(
      shape,
      [&](std::string* timing) {
        const auto [blas, dnnl] =
            cpu_internal::TimeGemms(trans_a, trans_b, m, n, k, threads_);
        absl::StrAppendFormat(timing, "openblas %.3f ms, onednn %.3f ms", blas,
                              dnnl);
        // OpenBLAS stays unless oneDNN is clearly faster.
        return dnnl < kSwitchMargin * blas;
      },
      &how);
  if (use) dnnl_gemms_.insert(KeyOf(trans_a, trans_b, m, n, k));
  return absl::StrCat(name, use ? "onednn" : "openblas", " (", how, ")");
}

void CpuBackend::BiasAdd(int rows, int cols, const float* bias, float* x) {
  absl::Status s = CheckMatrixArgs("BiasAdd", rows, cols, bias, x);
  if (!s.ok()) return Record(std::move(s));
  for (int r = 0; r < rows; ++r) {
    float* __restrict row = x + static_cast<size_t>(r) * cols;
    const float* __restrict b = bias;
    for (int c = 0; c < cols; ++c) row[c] += b[c];
  }
}

void CpuBackend::BiasRelu(int rows, int cols, const float* bias, float* x) {
  absl::Status s = CheckMatrixArgs("BiasRelu", rows, cols, bias, x);
  if (!s.ok()) return Record(std::move(s));
  for (int r = 0; r < rows; ++r) {
    float* __restrict row = x + static_cast<size_t>(r) * cols;
    const float* __restrict b = bias;
    for (int c = 0; c < cols; ++c) {
      row[c] = elementwise::BiasRelu(row[c], b[c]);
    }
  }
}

void CpuBackend::Relu(size_t n, const float* x, float* y) {
  if (n > 0 && (x == nullptr || y == nullptr)) {
    return Record(absl::InvalidArgumentError("Relu: null pointer"));
  }
  for (size_t i = 0; i < n; ++i) y[i] = elementwise::Relu(x[i]);
}

void CpuBackend::ReluBackward(size_t n, const float* y, const float* dy,
                              float* dx) {
  if (n > 0 && (y == nullptr || dy == nullptr || dx == nullptr)) {
    return Record(absl::InvalidArgumentError("ReluBackward: null pointer"));
  }
  for (size_t i = 0; i < n; ++i) dx[i] = elementwise::ReluGrad(y[i], dy[i]);
}

void CpuBackend::SoftmaxCrossEntropy(int rows, int classes, const float* logits,
                                     const int32_t* labels, float grad_scale,
                                     float* grad_logits, XentStats* stats) {
  absl::Status s = CheckXentArgs(rows, classes, logits, labels, stats);
  if (!s.ok()) return Record(std::move(s));
  double loss_sum = 0.0;
  int64_t correct = 0;
  for (int r = 0; r < rows; ++r) {
    const size_t offset = static_cast<size_t>(r) * classes;
    const elementwise::RowXent row = elementwise::SoftmaxXentRow(
        logits + offset, classes, labels[r], grad_scale,
        grad_logits == nullptr ? nullptr : grad_logits + offset);
    loss_sum += row.loss;
    correct += row.correct;
  }
  stats->loss_sum = loss_sum;
  stats->correct = correct;
}

void CpuBackend::ColumnSums(int rows, int cols, float alpha, const float* x,
                            float beta, float* y) {
  absl::Status s = CheckMatrixArgs("ColumnSums", rows, cols, x, y);
  if (!s.ok()) return Record(std::move(s));
  if (cols > 0 && y == nullptr) {
    return Record(absl::InvalidArgumentError("ColumnSums: y is null"));
  }
  // Columns in blocks: each block's partial sums live in a stack array (L1)
  // while the rows stream through with unit stride, and the epilogue applies
  // AlphaBeta to the finished sum exactly as the GPU kernel does.
  constexpr int kBlock = 512;
  float acc[kBlock];
  for (int c0 = 0; c0 < cols; c0 += kBlock) {
    const int width = std::min(kBlock, cols - c0);
    std::fill(acc, acc + width, 0.0f);
    for (int r = 0; r < rows; ++r) {
      const float* __restrict row = x + static_cast<size_t>(r) * cols + c0;
      for (int c = 0; c < width; ++c) acc[c] += row[c];
    }
    float* __restrict out = y + c0;
    for (int c = 0; c < width; ++c) {
      out[c] = elementwise::AlphaBeta(alpha, acc[c], beta, out[c]);
    }
  }
}

void CpuBackend::Im2Col(const ImageShape& shape, int kernel, const float* x,
                        float* cols) {
  absl::Status s =
      CheckWindowArgs("Im2Col", WindowOp::kConv, shape, kernel, x, cols);
  if (!s.ok()) return Record(std::move(s));
  cpu_internal::Im2ColLoop(shape, kernel, x, cols);
}

void CpuBackend::Col2Im(const ImageShape& shape, int kernel, const float* cols,
                        float* dx) {
  absl::Status s =
      CheckWindowArgs("Col2Im", WindowOp::kConv, shape, kernel, cols, dx);
  if (!s.ok()) return Record(std::move(s));
  cpu_internal::Col2ImLoop(shape, kernel, cols, dx);
}

void CpuBackend::MaxPool(const ImageShape& shape, int pool, const float* x,
                         float* y, int32_t* argmax) {
  absl::Status s =
      CheckWindowArgs("MaxPool", WindowOp::kPool, shape, pool, x, y, argmax);
  if (!s.ok()) return Record(std::move(s));
  cpu_internal::MaxPoolLoop(shape, pool, x, y, argmax);
}

void CpuBackend::MaxPoolBackward(const ImageShape& shape, int pool,
                                 const int32_t* argmax, const float* dy,
                                 float* dx) {
  absl::Status s = CheckWindowArgs("MaxPoolBackward", WindowOp::kPool, shape,
                                   pool, argmax, dy, dx);
  if (!s.ok()) return Record(std::move(s));
  cpu_internal::MaxPoolBackwardLoop(shape, pool, argmax, dy, dx);
}

void CpuBackend::Axpy(size_t n, float alpha, const float* x, float* y) {
  if (n > 0 && (x == nullptr || y == nullptr)) {
    return Record(absl::InvalidArgumentError("Axpy: null pointer"));
  }
  for (size_t i = 0; i < n; ++i) y[i] = elementwise::Axpy(alpha, x[i], y[i]);
}

void CpuBackend::Scale(size_t n, float alpha, float* x) {
  if (n > 0 && x == nullptr) {
    return Record(absl::InvalidArgumentError("Scale: null pointer"));
  }
  for (size_t i = 0; i < n; ++i) x[i] *= alpha;
}

void CpuBackend::Fill(size_t n, float value, float* x) {
  if (n > 0 && x == nullptr) {
    return Record(absl::InvalidArgumentError("Fill: null pointer"));
  }
  std::fill(x, x + n, value);
}

void CpuBackend::EmbeddingBagForward(Pooling pooling,
                                     const EmbeddingBatch& batch, int dim,
                                     const float* rows, int bags_per_row,
                                     int out_stride, float* out) {
  absl::Status s = CheckEmbeddingBagArgs(EmbeddingOp::kForward, batch, dim,
                                         rows, bags_per_row, out_stride, out);
  if (s.ok()) s = CheckEmbeddingBatchContents(EmbeddingOp::kForward, batch);
  if (!s.ok()) return Record(std::move(s));
  cpu_internal::EmbeddingForwardLoop(pooling == Pooling::kMean, batch, dim,
                                     rows, bags_per_row, out_stride, out);
}

void CpuBackend::EmbeddingBagBackward(Pooling pooling,
                                      const EmbeddingBatch& batch, int dim,
                                      const float* grad_out, int bags_per_row,
                                      int grad_out_stride, float* grad_rows) {
  absl::Status s =
      CheckEmbeddingBagArgs(EmbeddingOp::kBackward, batch, dim, grad_out,
                            bags_per_row, grad_out_stride, grad_rows);
  if (s.ok()) s = CheckEmbeddingBatchContents(EmbeddingOp::kBackward, batch);
  if (!s.ok()) return Record(std::move(s));
  cpu_internal::EmbeddingBackwardLoop(pooling == Pooling::kMean, batch, dim,
                                      grad_out, bags_per_row, grad_out_stride,
                                      &sources_, grad_rows);
}

absl::Status CpuBackend::Synchronize() {
  return std::exchange(error_, absl::OkStatus());
}

absl::StatusOr<void*> CpuBackend::AllocateBytes(size_t bytes) {
  void* p = AlignedAlloc(bytes);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(device_, ": cannot allocate ", bytes, " bytes"));
  }
  return p;
}

void CpuBackend::FreeBytes(void* ptr) { std::free(ptr); }

absl::StatusOr<void*> CpuBackend::AllocateHostBytes(size_t bytes) {
  return AllocateBytes(bytes);
}

void CpuBackend::FreeHostBytes(void* ptr) { std::free(ptr); }

void CpuBackend::CopyToDeviceBytes(const void* host, size_t bytes,
                                   void* device) {
  if (bytes > 0 && host != device) std::memcpy(device, host, bytes);
}

void CpuBackend::CopyToDeviceEarlyBytes(const void* host, size_t bytes,
                                        void* device) {
  CopyToDeviceBytes(host, bytes, device);
}

void CpuBackend::CopyToHostBytes(const void* device, size_t bytes, void* host) {
  if (bytes > 0 && host != device) std::memcpy(host, device, bytes);
}

void CpuBackend::CopyOnDeviceBytes(const void* src, size_t bytes, void* dst) {
  if (bytes > 0 && src != dst) std::memmove(dst, src, bytes);
}

}  // namespace ps
