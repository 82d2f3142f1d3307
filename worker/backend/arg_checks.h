// Argument checks shared by the backends, so that every backend rejects the
// same calls with the same message (the argument named).
//
//   absl::Status s = CheckGemmArgs(ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
//   if (!s.ok()) { RecordError(s); return; }

#ifndef WORKER_BACKEND_ARG_CHECKS_H_
#define WORKER_BACKEND_ARG_CHECKS_H_

#include <cstddef>
#include <cstdint>

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

// OK when an Im2Col/Col2Im (window = kernel, odd) or MaxPool (window =
// pool) call is consistent: sizes >= 0, window >= 1 (odd for a conv),
// batch * height * width and window^2 * channels within int, and the
// pointers non-null when the image has elements. `op` prefixes the message.
enum class WindowOp { kConv, kPool };
absl::Status CheckWindowArgs(const char* op, WindowOp kind,
                             const ImageShape& shape, int window,
                             const void* p0, const void* p1,
                             const void* p2 = nullptr);

// Elements of an NHWC image batch (shape as checked above), and of its
// pool x pool max-pooled output.
size_t ImageElements(const ImageShape& shape);
size_t PooledElements(const ImageShape& shape, int pool);

// Which EmbeddingBag op a check is for: the message names it, and Backward
// also needs the row CSR and checks it.
enum class EmbeddingOp { kForward, kBackward };

// OK when the sizes and pointers of an EmbeddingBagForward/Backward call are
// consistent: counts >= 0, num_bags == 0 implies num_indices == 0, dim >= 1,
// bags_per_row >= 1, stride >= bags_per_row * dim, and every array with
// elements non-null. `in` is rows (Forward) or grad_out (Backward), `out` is
// out or grad_rows. Reads no backend memory.
absl::Status CheckEmbeddingBagArgs(EmbeddingOp op, const EmbeddingBatch& batch,
                                   int dim, const void* in, int bags_per_row,
                                   int stride, const void* out);

// OK when the batch's arrays hold what EmbeddingBatch requires: offsets and
// indices, plus (kBackward) the row CSR being exactly the inverse of indices.
// The arrays must be host-readable and CheckEmbeddingBagArgs must have
// passed. The message names the first bad element.
absl::Status CheckEmbeddingBatchContents(EmbeddingOp op,
                                         const EmbeddingBatch& batch);

}  // namespace ps

#endif  // WORKER_BACKEND_ARG_CHECKS_H_
