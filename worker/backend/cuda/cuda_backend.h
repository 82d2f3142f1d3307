// The CUDA backend: cuBLAS sgemm, the small kernels of cuda_kernels.h, and
// two streams per device: one for compute, one for host<->device copies, so
// that uploads and downloads overlap compute.
//
// Ordering: all calls behave as if they ran in call order on one stream.
// CopyToDevice runs on the copy stream after everything enqueued before it,
// and later compute waits for it; CopyToDeviceEarly skips the first wait, so
// a model uploads layer 1's weights while layer 0 computes. CopyToHost runs on
// the copy stream after all earlier compute and overlaps later compute (see
// Backend::CopyToHost for the rule that buys). Host memory from AllocateHost is
// page-locked (cudaMallocHost), which makes the copies truly asynchronous.
//
//   absl::StatusOr<std::unique_ptr<CudaBackend>> b = CudaBackend::Create(0);
//   if (!b.ok()) return b.status();   // no such GPU, or no driver
//
// Thread-compatible: one thread drives a CudaBackend. Every call makes the
// backend's GPU current on the calling thread first, so a thread may drive
// backends of different GPUs in turn.

#ifndef WORKER_BACKEND_CUDA_CUDA_BACKEND_H_
#define WORKER_BACKEND_CUDA_CUDA_BACKEND_H_

#include <cuda_runtime.h>

#include <memory>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/backend/backend.h"
#include "worker/backend/cuda/cuda_libs.h"

namespace ps {

class CudaBackend final : public Backend {
 public:
  // Number of visible GPUs; 0 when there is none or no usable driver.
  static int DeviceCount();

  // A backend on GPU `ordinal`, named "gpu:<ordinal>". kFailedPrecondition
  // when no such GPU is visible, kInternal when CUDA/cuBLAS setup fails.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(int ordinal);

  // Waits for outstanding work, then frees the streams and handles. All
  // DeviceBuffers/HostBuffers of this backend must be gone by then.
  ~CudaBackend() override;

  int ordinal() const { return ordinal_; }
  // The compute stream, for libraries that enqueue on it (NCCL).
  cudaStream_t stream() const { return compute_; }
  // Makes this backend's GPU current on the calling thread.
  absl::Status Activate() const;
  // Keeps the first error for Synchronize(); for helpers enqueueing on
  // stream() (GpuReducer).
  void Record(absl::Status status);

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
  // cudaHostRegister (portable: every GPU of the process may copy with it).
  // A range another backend of the process registered first is used as is
  // and left to that backend to unregister.
  absl::Status PinHostBytes(void* host, size_t bytes) override;
  void UnpinHostBytes(void* host) override;

 private:
  explicit CudaBackend(int ordinal);
  // Records `what` failed unless e is cudaSuccess; returns e == cudaSuccess.
  bool Ok(cudaError_t e, const char* what);
  // Records `what` failed with `error` unless it is null (cuda_libs.h).
  bool Ok(const char* error, const char* what);
  // Makes `waiter` wait for all work enqueued so far on `signaller`.
  bool StreamWait(cudaStream_t waiter, cudaStream_t signaller);
  // Grows the per-row scratch of SoftmaxCrossEntropy to >= rows.
  bool EnsureXentScratch(int rows);
  // Allocates and zeroes the embedding check flags on first use.
  bool EnsureEmbeddingFlags();
  // After the streams are idle: turns set embedding check flags into the
  // recorded error and clears them.
  void CollectEmbeddingErrors();

  const int ordinal_;
  const std::string device_;
  cudaStream_t compute_ = nullptr;
  cudaStream_t copy_ = nullptr;
  cuda::BlasHandle cublas_ = nullptr;
  absl::Status error_;
  DeviceBuffer<float> row_loss_;
  DeviceBuffer<int32_t> row_correct_;
  // One int32 of cuda::EmbeddingErrorBits, set by the device-side contents
  // checks; read and cleared by Synchronize() when an embedding call ran.
  DeviceBuffer<int32_t> embedding_flags_;
  bool embedding_pending_ = false;
  // Ranges PinHostBytes found registered by another backend (guarded by the
  // base class's pin lock, under which PinHostBytes/UnpinHostBytes run).
  std::set<const void*> borrowed_pins_;
};

}  // namespace ps

#endif  // WORKER_BACKEND_CUDA_CUDA_BACKEND_H_
