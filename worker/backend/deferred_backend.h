// DeferredBackend: a test double that behaves like a GPU backend while
// computing on the CPU, so code written against Backend (models, trainers)
// can be tested for its device-memory discipline on machines without a GPU.
//
//  - host_memory() is false; Allocate hands out separate memory, and every
//    compute call checks that each pointer lies inside one live allocation
//    with the extent the call will touch; every copy checks which side is
//    device memory. A violation is reported by Synchronize().
//  - Nothing runs until Synchronize(): calls are queued and then executed in
//    order on a CpuBackend. Reading a CopyToHost result, or reusing a
//    CopyToDevice source, before Synchronize() therefore shows up as wrong
//    data in tests, as it would on a GPU.
//
//   DeferredBackend dev;
//   absl::StatusOr<std::unique_ptr<Model>> m = Model::Create(spec, &dev, 64);
//
// Thread-compatible, like every Backend.

#ifndef WORKER_BACKEND_DEFERRED_BACKEND_H_
#define WORKER_BACKEND_DEFERRED_BACKEND_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "worker/backend/arg_checks.h"
#include "worker/backend/backend.h"
#include "worker/backend/cpu/cpu_backend.h"

namespace ps {

class DeferredBackend final : public Backend {
 public:
  explicit DeferredBackend(std::string device = "deferred:0");
  ~DeferredBackend() override;

  // Calls run by Synchronize() so far (compute and copies).
  int64_t calls_run() const { return calls_run_; }
  // Bytes copied to or from host memory pinned by PinHost (which here only
  // keeps the bookkeeping): shows that a caller copied straight from or into
  // its own pinned memory rather than through a staging buffer.
  int64_t pinned_copy_bytes() const { return pinned_copy_bytes_; }

  const std::string& device() const override { return device_; }
  bool host_memory() const override { return false; }

  void Gemm(Transpose trans_a, Transpose trans_b, int m, int n, int k,
            float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc) override;
  void BiasAdd(int rows, int cols, const float* bias, float* x) override;
  void BiasRelu(int rows, int cols, const float* bias, float* x) override;
  void Relu(size_t n, const float* x, float* y) override;
  void ReluBackward(size_t n, const float* y, const float* dy,
                    float* dx) override;
  void SoftmaxCrossEntropy(int rows, int classes, const float* logits,
                           const int32_t* labels, float grad_scale,
                           float* grad_logits, XentStats* stats) override;
  void ColumnSums(int rows, int cols, float alpha, const float* x, float beta,
                  float* y) override;
  void Im2Col(const ImageShape& shape, int kernel, const float* x,
              float* cols) override;
  void Col2Im(const ImageShape& shape, int kernel, const float* cols,
              float* dx) override;
  void MaxPool(const ImageShape& shape, int pool, const float* x, float* y,
               int32_t* argmax) override;
  void MaxPoolBackward(const ImageShape& shape, int pool, const int32_t* argmax,
                       const float* dy, float* dx) override;
  void Axpy(size_t n, float alpha, const float* x, float* y) override;
  void Scale(size_t n, float alpha, float* x) override;
  void Fill(size_t n, float value, float* x) override;
  void EmbeddingBagForward(Pooling pooling, const EmbeddingBatch& batch,
                           int dim, const float* rows, int bags_per_row,
                           int out_stride, float* out) override;
  void EmbeddingBagBackward(Pooling pooling, const EmbeddingBatch& batch,
                            int dim, const float* grad_out, int bags_per_row,
                            int grad_out_stride, float* grad_rows) override;
  absl::Status Synchronize() override;

 protected:
  absl::StatusOr<void*> AllocateBytes(size_t bytes) override;
  void FreeBytes(void* ptr) override;
  absl::StatusOr<void*> AllocateHostBytes(size_t bytes) override;
  void FreeHostBytes(void* ptr) override;
  void CopyToDeviceBytes(const void* host, size_t bytes, void* device) override;
  void CopyToDeviceEarlyBytes(const void* host, size_t bytes,
                              void* device) override;
  void CopyToHostBytes(const void* device, size_t bytes, void* host) override;
  void CopyOnDeviceBytes(const void* src, size_t bytes, void* dst) override;

 private:
  // True when [p, p + bytes) lies inside one live device allocation (any p
  // when bytes == 0).
  bool OnDevice(const void* p, size_t bytes) const;
  // Records "<device>: <op>: <what>" as the error unless `ok`.
  bool Check(bool ok, const char* op, const char* what);
  void Enqueue(std::function<void()> call);
  // Checks a window op's sizes (CheckWindowArgs) and that its arrays of
  // `bytes[i]` bytes lie in device memory; records the error unless OK.
  bool CheckWindow(const char* op, WindowOp kind, const ImageShape& shape,
                   int window, const void* const (&arrays)[3],
                   const size_t (&bytes)[3]);
  // Checks the sizes, then that every array of `batch` (the row CSR only
  // for kBackward) lies in device memory; records the error unless OK.
  bool CheckEmbeddingBatch(EmbeddingOp op, const EmbeddingBatch& batch, int dim,
                           const void* in, int bags_per_row, int stride,
                           const void* out);

  const std::string device_;
  std::unique_ptr<CpuBackend> cpu_;
  std::map<uintptr_t, size_t> allocations_;  // start -> bytes
  std::vector<std::function<void()>> queue_;
  absl::Status error_;
  int64_t calls_run_ = 0;
  int64_t pinned_copy_bytes_ = 0;
};

}  // namespace ps

#endif  // WORKER_BACKEND_DEFERRED_BACKEND_H_
