// DirectConv (worker/backend/direct_conv.h) on oneDNN 2.6: convolution
// forward (bias and ReLU fused), backward data and backward weights, with
// NHWC activations and the weights in whatever layout oneDNN's kernels
// prefer: Forward reorders w into it once per call (once per step and
// chunk), BackwardData reuses that copy, BackwardWeights reorders its
// result back into the models' layout. Primitives are created once per row
// count and cached.
//
//   absl::StatusOr<std::unique_ptr<DnnlConv>> conv =
//       DnnlConv::Create(shape, /*threads=*/1, record_error);
//
// Reproducibility: oneDNN picks one implementation per primitive from the
// ISA and the thread count, and its CPU kernels partition work statically,
// so with the thread count fixed here (OpenMP threads of the calling thread,
// set before every call) a call gives the same bits every run. They differ
// from Im2Col + Gemm's in the last bits (another summation order):
// dnnl_conv_test bounds the difference.
//
// Thread-compatible, like its backend.

#ifndef WORKER_BACKEND_CPU_DNNL_CONV_H_
#define WORKER_BACKEND_CPU_DNNL_CONV_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "worker/backend/direct_conv.h"

namespace ps {

class DnnlConv final : public DirectConv {
 public:
  // `threads` (>= 1): oneDNN's threads for every call. `record` receives
  // the errors of later calls (bad arguments, a oneDNN failure), for the
  // backend's Synchronize(); the call is then a no-op. kInvalidArgument for
  // a bad shape, kUnimplemented when oneDNN has no kernels for it.
  static absl::StatusOr<std::unique_ptr<DnnlConv>> Create(
      const DirectConvShape& shape, int threads,
      std::function<void(absl::Status)> record);
  ~DnnlConv() override;

  // oneDNN's implementation names at max_rows, e.g. "fwd jit:avx512_core,
  // bwd_d jit:avx512_core, bwd_w jit:avx512_core".
  std::string ImplNames();

  void Forward(int rows, const float* x, const float* w, const float* b,
               float* y) override;
  void BackwardData(int rows, const float* dy, float* dx) override;
  void BackwardWeights(int rows, const float* x, const float* dy, float beta,
                       float* dw, float* db) override;

 private:
  // One row count's primitives and the memory they keep.
  struct Prims;

  DnnlConv(const DirectConvShape& shape, int threads,
           std::function<void(absl::Status)> record);
  // The primitives for `rows`, created on first use; null after recording
  // an error (bad rows, a oneDNN failure).
  Prims* PrimsFor(int rows);
  bool CheckRows(const char* op, int rows);

  const DirectConvShape shape_;
  const int threads_;
  std::function<void(absl::Status)> record_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::map<int, std::unique_ptr<Prims>> prims_;
  Prims* last_forward_ = nullptr;  // whose weights BackwardData uses
};

}  // namespace ps

#endif  // WORKER_BACKEND_CPU_DNNL_CONV_H_
