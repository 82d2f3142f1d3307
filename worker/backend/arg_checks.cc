#include "worker/backend/arg_checks.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

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

absl::Status CheckWindowArgs(const char* op, WindowOp kind,
                             const ImageShape& shape, int window,
                             const void* p0, const void* p1, const void* p2) {
  const struct {
    const char* name;
    int value;
  } sizes[] = {{"batch", shape.batch},
               {"height", shape.height},
               {"width", shape.width},
               {"channels", shape.channels}};
  for (const auto& size : sizes) {
    if (size.value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": ", size.name, " = ", size.value));
    }
  }
  const char* name = kind == WindowOp::kConv ? "kernel" : "pool";
  if (window < 1 || (kind == WindowOp::kConv && window % 2 == 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", name, " = ", window,
        kind == WindowOp::kConv ? " (must be odd, >= 1)" : " (must be >= 1)"));
  }
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  const int64_t pixels = int64_t{shape.batch} * shape.height * shape.width;
  if (shape.height > 0 && shape.width > 0 &&
      (pixels > kMaxInt ||
       int64_t{window} * window * shape.channels > kMaxInt ||
       static_cast<uint64_t>(pixels) * window * window * shape.channels >
           std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": the ", shape.batch, " x ", shape.height, " x ",
                     shape.width, " x ", shape.channels, " batch with ", name,
                     " ", window, " overflows"));
  }
  if (ImageElements(shape) > 0 &&
      (p0 == nullptr || p1 == nullptr ||
       (kind == WindowOp::kPool && p2 == nullptr))) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": null pointer"));
  }
  return absl::OkStatus();
}

size_t ImageElements(const ImageShape& shape) {
  return static_cast<size_t>(shape.batch) * shape.height * shape.width *
         shape.channels;
}

size_t PooledElements(const ImageShape& shape, int pool) {
  return static_cast<size_t>(shape.batch) * (shape.height / pool) *
         (shape.width / pool) * shape.channels;
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

namespace {

const char* OpName(EmbeddingOp op) {
  return op == EmbeddingOp::kForward ? "EmbeddingBagForward"
                                     : "EmbeddingBagBackward";
}

absl::Status EmbeddingError(EmbeddingOp op, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(OpName(op), ": ", what));
}

// offsets[0] == 0, non-decreasing, offsets[n] == end; `name` names the array.
absl::Status CheckCsrOffsets(EmbeddingOp op, const char* name,
                             const int32_t* offsets, int n, int end) {
  if (offsets[0] != 0) {
    return EmbeddingError(op,
                          absl::StrCat(name, "[0] = ", offsets[0], " != 0"));
  }
  for (int i = 1; i <= n; ++i) {
    if (offsets[i] < offsets[i - 1]) {
      return EmbeddingError(
          op, absl::StrCat(name, "[", i, "] = ", offsets[i], " < ", name, "[",
                           i - 1, "] = ", offsets[i - 1]));
    }
  }
  if (offsets[n] != end) {
    return EmbeddingError(op, absl::StrCat(name, "[", n, "] = ", offsets[n],
                                           " != num_indices = ", end));
  }
  return absl::OkStatus();
}

// The row CSR is the inverse of indices: each row's occurrences strictly
// ascending and each naming that row. With the counts matching (offsets end
// at num_indices), every occurrence then appears exactly once.
absl::Status CheckRowInverse(EmbeddingOp op, const EmbeddingBatch& b) {
  if (b.num_rows == 0) return absl::OkStatus();  // indices were checked empty
  PS_RETURN_IF_ERROR(CheckCsrOffsets(op, "row_offsets", b.row_offsets,
                                     b.num_rows, b.num_indices));
  for (int u = 0; u < b.num_rows; ++u) {
    for (int k = b.row_offsets[u]; k < b.row_offsets[u + 1]; ++k) {
      const int32_t p = b.row_occurrences[k];
      if (p < 0 || p >= b.num_indices) {
        return EmbeddingError(op, absl::StrCat("row_occurrences[", k, "] = ", p,
                                               " outside [0, num_indices = ",
                                               b.num_indices, ")"));
      }
      if (k > b.row_offsets[u] && p <= b.row_occurrences[k - 1]) {
        return EmbeddingError(
            op, absl::StrCat("row_occurrences[", k, "] = ", p,
                             " not above row_occurrences[", k - 1, "] = ",
                             b.row_occurrences[k - 1], " (row ", u, ")"));
      }
      if (b.indices[p] != u) {
        return EmbeddingError(
            op,
            absl::StrCat("row_occurrences[", k, "] = ", p, " listed under row ",
                         u, " but indices[", p, "] = ", b.indices[p]));
      }
    }
  }
  return absl::OkStatus();
}

// Branch-free scans for the common case of a good batch (a step checks
// every batch, so they are on the hot path); the loops above run only to
// name a failure.
bool CsrOffsetsOk(const int32_t* offsets, int n, int end) {
  bool bad = offsets[0] != 0 || offsets[n] != end;
  for (int i = 1; i <= n; ++i) bad |= offsets[i] < offsets[i - 1];
  return !bad;
}

bool IndicesOk(const EmbeddingBatch& b) {
  bool bad = false;
  for (int p = 0; p < b.num_indices; ++p) {
    bad |= static_cast<uint32_t>(b.indices[p]) >=
           static_cast<uint32_t>(b.num_rows);
  }
  return !bad;
}

// Requires IndicesOk and num_rows > 0.
bool RowInverseOk(const EmbeddingBatch& b) {
  if (!CsrOffsetsOk(b.row_offsets, b.num_rows, b.num_indices)) return false;
  bool bad = false;
  const uint32_t last = static_cast<uint32_t>(b.num_indices) - 1;
  for (int u = 0; u < b.num_rows; ++u) {
    int32_t previous = -1;
    for (int k = b.row_offsets[u]; k < b.row_offsets[u + 1]; ++k) {
      const uint32_t p = static_cast<uint32_t>(b.row_occurrences[k]);
      const uint32_t clamped = p < last ? p : last;  // never read past indices
      bad |= p != clamped || b.indices[clamped] != u ||
             static_cast<int32_t>(p) <= previous;
      previous = static_cast<int32_t>(p);
    }
  }
  return !bad;
}

}  // namespace

absl::Status CheckEmbeddingBagArgs(EmbeddingOp op, const EmbeddingBatch& batch,
                                   int dim, const void* in, int bags_per_row,
                                   int stride, const void* out) {
  const bool backward = op == EmbeddingOp::kBackward;
  if (batch.num_bags < 0) {
    return EmbeddingError(op, absl::StrCat("num_bags = ", batch.num_bags));
  }
  if (batch.num_rows < 0) {
    return EmbeddingError(op, absl::StrCat("num_rows = ", batch.num_rows));
  }
  if (batch.num_indices < 0) {
    return EmbeddingError(op,
                          absl::StrCat("num_indices = ", batch.num_indices));
  }
  if (batch.num_bags == 0 && batch.num_indices > 0) {
    return EmbeddingError(op, absl::StrCat("num_indices = ", batch.num_indices,
                                           " with num_bags = 0"));
  }
  if (dim < 1) return EmbeddingError(op, absl::StrCat("dim = ", dim));
  if (bags_per_row < 1) {
    return EmbeddingError(op, absl::StrCat("bags_per_row = ", bags_per_row));
  }
  const int64_t row_width = static_cast<int64_t>(bags_per_row) * dim;
  if (stride < row_width) {
    return EmbeddingError(
        op, absl::StrCat(backward ? "grad_out_stride = " : "out_stride = ",
                         stride, " < bags_per_row * dim = ", row_width));
  }
  struct Array {
    bool needed;
    const void* p;
    const char* name;
  };
  const Array arrays[] = {
      {batch.num_bags > 0, batch.offsets, "offsets"},
      {batch.num_indices > 0, batch.indices, "indices"},
      {backward && batch.num_rows > 0, batch.row_offsets, "row_offsets"},
      {backward && batch.num_indices > 0, batch.row_occurrences,
       "row_occurrences"},
      {backward ? batch.num_bags > 0 : batch.num_indices > 0, in,
       backward ? "grad_out" : "rows"},
      {backward ? batch.num_rows > 0 : batch.num_bags > 0, out,
       backward ? "grad_rows" : "out"},
  };
  for (const Array& a : arrays) {
    if (a.needed && a.p == nullptr) {
      return EmbeddingError(op, absl::StrCat(a.name, " is null"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckEmbeddingBatchContents(EmbeddingOp op,
                                         const EmbeddingBatch& batch) {
  const bool backward = op == EmbeddingOp::kBackward;
  if ((batch.num_bags == 0 ||
       CsrOffsetsOk(batch.offsets, batch.num_bags, batch.num_indices)) &&
      IndicesOk(batch) &&
      (!backward || batch.num_rows == 0 || RowInverseOk(batch))) {
    return absl::OkStatus();
  }
  if (batch.num_bags > 0) {
    PS_RETURN_IF_ERROR(CheckCsrOffsets(op, "offsets", batch.offsets,
                                       batch.num_bags, batch.num_indices));
  }
  for (int p = 0; p < batch.num_indices; ++p) {
    const int32_t r = batch.indices[p];
    if (r < 0 || r >= batch.num_rows) {
      return EmbeddingError(
          op, absl::StrCat("indices[", p, "] = ", r,
                           " outside [0, num_rows = ", batch.num_rows, ")"));
    }
  }
  if (op == EmbeddingOp::kBackward) return CheckRowInverse(op, batch);
  return absl::OkStatus();
}

}  // namespace ps
