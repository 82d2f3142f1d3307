#include "worker/backend/arg_checks.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ps {

absl::Status CheckGemmArgs(Transpose trans_a, Transpose trans_b, int m, int n,
                           int k, const float* a, int lda, const float* b,
                           int ldb, const float* c, int ldc) {
  if (m < 0) return absl::InvalidArgumentError(absl::StrCat("Gemm: m = ", m));
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("Gemm: n = ", n));
  if (k < 0) return absl::InvalidArgumentError(absl::StrCat("Gemm: k = ", k));
  // Stored column counts of the row-major operands.
  const int a_cols = trans_a == Transpose::kNo ? k : m;
  const int b_cols = trans_b == Transpose::kNo ? n : k;
  if (lda < std::max(1, a_cols)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gemm: lda = ", lda, " < ", std::max(1, a_cols)));
  }
  if (ldb < std::max(1, b_cols)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gemm: ldb = ", ldb, " < ", std::max(1, b_cols)));
  }
  if (ldc < std::max(1, n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gemm: ldc = ", ldc, " < ", std::max(1, n)));
  }
  if (m > 0 && n > 0) {
    if (c == nullptr) return absl::InvalidArgumentError("Gemm: c is null");
    if (k > 0 && a == nullptr) {
      return absl::InvalidArgumentError("Gemm: a is null");
    }
    if (k > 0 && b == nullptr) {
      return absl::InvalidArgumentError("Gemm: b is null");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckMatrixArgs(const char* op, int rows, int cols, const void* p0,
                             const void* p1) {
  if (rows < 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": rows = ", rows));
  }
  if (cols < 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": cols = ", cols));
  }
  if (rows > 0 && cols > 0 && (p0 == nullptr || p1 == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": null pointer"));
  }
  return absl::OkStatus();
}

absl::Status CheckXentArgs(int rows, int classes, const float* logits,
                           const int32_t* labels, const XentStats* stats) {
  if (rows < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("SoftmaxCrossEntropy: rows = ", rows));
  }
  if (classes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("SoftmaxCrossEntropy: classes = ", classes));
  }
  if (stats == nullptr) {
    return absl::InvalidArgumentError("SoftmaxCrossEntropy: stats is null");
  }
  if (rows > 0 && (logits == nullptr || labels == nullptr)) {
    return absl::InvalidArgumentError(
        "SoftmaxCrossEntropy: logits or labels is null");
  }
  return absl::OkStatus();
}

}  // namespace ps
