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

// A batch of NHWC images (see Backend::Im2Col).
struct ImageShape {
  int batch;
  int height;
  int width;
  int channels;
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

// ---- Convolution and pooling (Backend::Im2Col etc.) ------------------------
// Images are NHWC: element (n, y, x, c) of a batch is at
// ((n * height + y) * width + x) * channels + c. The functions give one output
// element each, by gathering (no atomics), so a CPU loop and a CUDA thread per
// element compute the same sums in the same order.

// Im2Col's element (row, col): row = (n, y, x) of the output pixel, col =
// (c * k + i) * k + j; the input pixel (y + i - p, x + j - p) with p = (k -
// 1) / 2, or 0 in the padding.
PS_HD float Im2ColAt(const ImageShape& s, int k, const float* x, size_t row,
                     int col) {
  const int c = col / (k * k);
  const int i = col / k % k;
  const int j = col % k;
  const int p = (k - 1) / 2;
  const int px = static_cast<int>(row % s.width);
  const size_t t = row / s.width;
  const int py = static_cast<int>(t % s.height);
  const size_t n = t / s.height;
  const int iy = py + i - p;
  const int ix = px + j - p;
  if (iy < 0 || iy >= s.height || ix < 0 || ix >= s.width) return 0.0f;
  return x[((n * s.height + iy) * s.width + ix) * s.channels + c];
}

// Col2Im's element e of dx: the sum, from 0.0f, of the cols entries that
// Im2Col copied from input element e, in ascending cols row order (kernel
// row i and column j descending).
PS_HD float Col2ImAt(const ImageShape& s, int k, const float* cols, size_t e) {
  const int c = static_cast<int>(e % s.channels);
  size_t t = e / s.channels;
  const int ix = static_cast<int>(t % s.width);
  t /= s.width;
  const int iy = static_cast<int>(t % s.height);
  const size_t n = t / s.height;
  const int p = (k - 1) / 2;
  const size_t row_len = static_cast<size_t>(k) * k * s.channels;
  float sum = 0.0f;
  for (int i = k - 1; i >= 0; --i) {
    const int oy = iy - i + p;
    if (oy < 0 || oy >= s.height) continue;
    for (int j = k - 1; j >= 0; --j) {
      const int ox = ix - j + p;
      if (ox < 0 || ox >= s.width) continue;
      const size_t row = (n * s.height + oy) * s.width + ox;
      sum += cols[row * row_len + (c * k + i) * k + j];
    }
  }
  return sum;
}

// MaxPool's output element o (of [batch, height / pool, width / pool,
// channels]): the window's first maximum in row-major scan, its position
// i * pool + j in *arg.
PS_HD float MaxPoolAt(const ImageShape& s, int pool, const float* x, size_t o,
                      int32_t* arg) {
  const int oh = s.height / pool;
  const int ow = s.width / pool;
  const int c = static_cast<int>(o % s.channels);
  size_t t = o / s.channels;
  const int ox = static_cast<int>(t % ow);
  t /= ow;
  const int oy = static_cast<int>(t % oh);
  const size_t n = t / oh;
  float best = 0.0f;
  int32_t best_at = -1;
  for (int i = 0; i < pool; ++i) {
    const size_t row = (n * s.height + oy * pool + i) * s.width + ox * pool;
    for (int j = 0; j < pool; ++j) {
      const float v = x[(row + j) * s.channels + c];
      if (best_at < 0 || v > best) {
        best = v;
        best_at = i * pool + j;
      }
    }
  }
  *arg = best_at;
  return best;
}

// MaxPoolBackward's element e of dx: dy of e's window when e is that window's
// argmax, else 0 (also for the rows and columns past the last whole window).
PS_HD float MaxPoolGradAt(const ImageShape& s, int pool, const int32_t* argmax,
                          const float* dy, size_t e) {
  const int c = static_cast<int>(e % s.channels);
  size_t t = e / s.channels;
  const int ix = static_cast<int>(t % s.width);
  t /= s.width;
  const int iy = static_cast<int>(t % s.height);
  const size_t n = t / s.height;
  const int oh = s.height / pool;
  const int ow = s.width / pool;
  const int oy = iy / pool;
  const int ox = ix / pool;
  if (oy >= oh || ox >= ow) return 0.0f;
  const size_t o = ((n * oh + oy) * ow + ox) * s.channels + c;
  return argmax[o] == (iy % pool) * pool + ix % pool ? dy[o] : 0.0f;
}

}  // namespace elementwise
}  // namespace ps

#endif  // WORKER_BACKEND_ELEMENTWISE_H_
