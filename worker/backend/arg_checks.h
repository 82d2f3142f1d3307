// Argument checks shared by the backends, so that every backend rejects the
// same calls with the same message (the argument named).
//
//   absl::Status s = CheckGemmArgs(ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
//   if (!s.ok()) { RecordError(s); return; }

#ifndef WORKER_BACKEND_ARG_CHECKS_H_
#define WORKER_BACKEND_ARG_CHECKS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "worker/backend/backend.h"

namespace ps {

// OK when the Gemm arguments describe consistent row-major operands:
// non-negative sizes, leading dimensions >= the stored column counts, and
// non-null pointers wherever an operand has elements.
absl::Status CheckGemmArgs(Transpose trans_a, Transpose trans_b, int m, int n,
                           int k, const float* a, int lda, const float* b,
                           int ldb, const float* c, int ldc);

// OK when rows, cols >= 0 and the pointers are non-null where rows * cols > 0.
// `op` prefixes the message ("BiasAdd: cols must be >= 0").
absl::Status CheckMatrixArgs(const char* op, int rows, int cols, const void* p0,
                             const void* p1);

// As CheckMatrixArgs for SoftmaxCrossEntropy, which also needs classes >= 1
// and a non-null stats pointer.
absl::Status CheckXentArgs(int rows, int classes, const float* logits,
                           const int32_t* labels, const XentStats* stats);

}  // namespace ps

#endif  // WORKER_BACKEND_ARG_CHECKS_H_
