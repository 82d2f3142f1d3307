// Direct convolution kernels that a backend may offer instead of the models'
// Im2Col + Gemm (the CPU backend's oneDNN kernels, worker/backend/cpu/
// dnnl_conv.h). A model asks once per conv layer, at creation:
//
//   DirectConvShape shape{max_rows, 28, 28, 1, 32, 5, /*input_grad=*/false};
//   std::string choice;
//   std::unique_ptr<DirectConv> conv = backend->CreateDirectConv(shape,
//                                                                &choice);
//   if (conv == nullptr) { ... Im2Col + Gemm as before ... }
//   conv->Forward(rows, x, w, b, y);             // y = ReLU(x * w + b)
//   conv->BackwardWeights(rows, x, dy, 0.0f, dw, db);
//   conv->BackwardData(rows, dy, dx);            // with Forward's w
//
// Layouts are the models' (backend.h): images NHWC; w is the Im2Col weight
// matrix [kernel^2 * in_c x filters], row (c * kernel + i) * kernel + j;
// b [filters]. "Same" padding, stride 1, as Im2Col. A DirectConv is
// thread-compatible, borrows its backend (which must outlive it) and runs
// its calls in the backend's call order.

#ifndef WORKER_BACKEND_DIRECT_CONV_H_
#define WORKER_BACKEND_DIRECT_CONV_H_

namespace ps {

// One "same", stride-1 convolution over up to `max_rows` NHWC images.
struct DirectConvShape {
  int max_rows = 0;
  int height = 0;
  int width = 0;
  int in_c = 0;
  int filters = 0;
  int kernel = 0;          // odd
  bool input_grad = true;  // whether BackwardData will be called
  // The row count the calls will mostly have, to time candidates at
  // (0: max_rows).
  int tune_rows = 0;
};

class DirectConv {
 public:
  virtual ~DirectConv() = default;

  // y [rows, height, width, filters] = max(conv(x, w) + b, 0), for 1 <= rows
  // <= max_rows. Keeps w (in the kernels' own layout) for BackwardData, so
  // the caller may change w after this returns.
  virtual void Forward(int rows, const float* x, const float* w, const float* b,
                       float* y) = 0;

  // dx [rows, height, width, in_c] = the input gradient of the last
  // Forward's convolution (its w) for dy, the gradient at the convolution's
  // output (after the ReLU's backward). Overwrites dx.
  virtual void BackwardData(int rows, const float* dy, float* dx) = 0;

  // dw = beta * dw + d(loss)/dw, db = beta * db + column sums of dy, for
  // input x and output gradient dy (as BackwardData). beta is 0 or 1.
  virtual void BackwardWeights(int rows, const float* x, const float* dy,
                               float beta, float* dw, float* db) = 0;
};

}  // namespace ps

#endif  // WORKER_BACKEND_DIRECT_CONV_H_
