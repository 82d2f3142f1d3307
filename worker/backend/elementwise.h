// Element-wise math shared by the CPU backend and the CUDA kernels.
//
// Every function here is `PS_HD`: compiled for the host by the C++ compiler
// and for both host and device by nvcc. The CPU backend loops over these
// functions and the CUDA kernels call them per thread, so the CPU tests cover
// the exact arithmetic the GPU runs. Keep this header free of anything nvcc or
// device code cannot take (no Abseil, no std containers).
//
//   float y = ps::elementwise::BiasRelu(x, b);  // max(x + b, 0)
//   ps::elementwise::RowXent r = ps::elementwise::SoftmaxXentRow(
//       logits, classes, label, /*grad_scale=*/1.0f, grad_row);

#ifndef WORKER_BACKEND_ELEMENTWISE_H_
#define WORKER_BACKEND_ELEMENTWISE_H_

#include <cmath>
#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#define PS_HD __host__ __device__ __forceinline__
#else
#define PS_HD inline
#endif

namespace ps {

// The result of a softmax cross-entropy over a batch, as written by
// Backend::SoftmaxCrossEntropy into backend memory (one element).
struct XentStats {
  double loss_sum;  // sum over rows of -log softmax(logits)[label]
  int64_t correct;  // rows whose first arg-max equals the label
};

namespace elementwise {

PS_HD float Relu(float x) { return x > 0.0f ? x : 0.0f; }

// Gradient through a ReLU given its OUTPUT y (y > 0 exactly where the input
// was > 0), so the pre-activation need not be kept.
PS_HD float ReluGrad(float y, float dy) { return y > 0.0f ? dy : 0.0f; }

PS_HD float BiasRelu(float x, float bias) { return Relu(x + bias); }

PS_HD float Axpy(float alpha, float x, float y) { return alpha * x + y; }

// y = alpha * sum + beta * y, where beta == 0 ignores y (it may hold NaNs, as
// BLAS does for beta == 0).
PS_HD float AlphaBeta(float alpha, float sum, float beta, float y) {
  return beta == 0.0f ? alpha * sum : alpha * sum + beta * y;
}

// Per-row outcome of SoftmaxXentRow.
struct RowXent {
  float loss;   // -log softmax(logits)[label]; +inf for a label out of range
  int correct;  // 1 if the first arg-max of the logits is the label
};

// Softmax cross-entropy of one row of `classes` (>= 1) logits against
// `label`. When `grad` is not null it receives
// grad_scale * (softmax(logits) - onehot(label)). A label outside
// [0, classes) never indexes memory: its loss is +inf, its one-hot is empty
// and it is never correct (callers validate labels; this only keeps a bad one
// from faulting on a device).
PS_HD RowXent SoftmaxXentRow(const float* logits, int classes, int label,
                             float grad_scale, float* grad) {
  float max_logit = logits[0];
  int arg_max = 0;
  for (int c = 1; c < classes; ++c) {
    if (logits[c] > max_logit) {
      max_logit = logits[c];
      arg_max = c;
    }
  }
  float sum = 0.0f;
  if (grad != nullptr) {
    // Keep exp() once per class: it is the only costly part of a row.
    for (int c = 0; c < classes; ++c) {
      const float e = expf(logits[c] - max_logit);
      grad[c] = e;
      sum += e;
    }
    const float inv = grad_scale / sum;
    for (int c = 0; c < classes; ++c) {
      grad[c] = grad[c] * inv - (c == label ? grad_scale : 0.0f);
    }
  } else {
    for (int c = 0; c < classes; ++c) sum += expf(logits[c] - max_logit);
  }
  const bool valid = label >= 0 && label < classes;
  RowXent r;
  r.loss = valid ? logf(sum) - (logits[label] - max_logit) : INFINITY;
  r.correct = (valid && arg_max == label) ? 1 : 0;
  return r;
}

// Where bag `bag` starts in an embedding-bag output laid out as
// Backend::EmbeddingBagForward describes: row bag / bags_per_row of stride
// `stride` floats, column (bag % bags_per_row) * dim.
PS_HD size_t BagOutputOffset(size_t bag, int bags_per_row, int stride,
                             int dim) {
  return bag / bags_per_row * static_cast<size_t>(stride) +
         bag % bags_per_row * static_cast<size_t>(dim);
}

// A bag's pooled output from the in-order sum of its `count` rows. A
// division, not a multiplication by 1/count: nvcc (and GCC with FMA) would
// fuse the latter into neighbouring adds, and the backends would disagree.
PS_HD float PoolBag(float sum, int count, bool mean) {
  return mean && count > 0 ? sum / static_cast<float>(count) : sum;
}

// One occurrence's share of its bag's output gradient g (count >= 1).
PS_HD float BagGradShare(float g, int count, bool mean) {
  return mean ? g / static_cast<float>(count) : g;
}

}  // namespace elementwise
}  // namespace ps

#endif  // WORKER_BACKEND_ELEMENTWISE_H_
