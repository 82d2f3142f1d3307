#include "worker/backend/cuda/cuda_backend.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/backend/arg_checks.h"
#include "worker/backend/cuda/cuda_kernels.h"

namespace ps {
int CudaBackend::DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // not sticky; clear it so later calls start clean
    return 0;
  }
  return count;
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(int ordinal) {
  const int count = DeviceCount();
  if (ordinal < 0 || ordinal >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("gpu:", ordinal, ": no such GPU (", count, " visible)"));
  }
  std::unique_ptr<CudaBackend> b(new CudaBackend(ordinal));
  PS_RETURN_IF_ERROR(b->Activate());
  if (!b->Ok(cudaStreamCreateWithFlags(&b->compute_, cudaStreamNonBlocking),
             "cudaStreamCreate") ||
      !b->Ok(cudaStreamCreateWithFlags(&b->copy_, cudaStreamNonBlocking),
             "cudaStreamCreate") ||
      !b->Ok(cuda::BlasCreate(b->compute_, &b->cublas_), "cublasCreate")) {
    return b->Synchronize();
  }
  return b;
}

CudaBackend::CudaBackend(int ordinal)
    : ordinal_(ordinal), device_(absl::StrCat("gpu:", ordinal)) {}

CudaBackend::~CudaBackend() {
  cudaSetDevice(ordinal_);
  if (compute_ != nullptr) cudaStreamSynchronize(compute_);
  if (copy_ != nullptr) cudaStreamSynchronize(copy_);
  UnpinAllHost();
  row_loss_.reset();
  row_correct_.reset();
  embedding_flags_.reset();
  cuda::BlasDestroy(cublas_);
  if (copy_ != nullptr) cudaStreamDestroy(copy_);
  if (compute_ != nullptr) cudaStreamDestroy(compute_);
}

absl::Status CudaBackend::Activate() const {
  const cudaError_t e = cudaSetDevice(ordinal_);
  if (e != cudaSuccess) {
    return absl::InternalError(
        absl::StrCat(device_, ": cudaSetDevice: ", cudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

void CudaBackend::Record(absl::Status status) {
  if (error_.ok()) error_ = std::move(status);
}

bool CudaBackend::Ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  Record(absl::InternalError(
      absl::StrCat(device_, ": ", what, ": ", cudaGetErrorString(e))));
  return false;
}

bool CudaBackend::Ok(const char* error, const char* what) {
  if (error == nullptr) return true;
  Record(absl::InternalError(absl::StrCat(device_, ": ", what, ": ", error)));
  return false;
}

bool CudaBackend::StreamWait(cudaStream_t waiter, cudaStream_t signaller) {
  cudaEvent_t event;
  if (!Ok(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
          "cudaEventCreate")) {
    return false;
  }
  const bool ok =
      Ok(cudaEventRecord(event, signaller), "cudaEventRecord") &&
      Ok(cudaStreamWaitEvent(waiter, event, 0), "cudaStreamWaitEvent");
  // Destroying a recorded event is deferred by CUDA until it completes.
  cudaEventDestroy(event);
  return ok;
}

bool CudaBackend::EnsureXentScratch(int rows) {
  if (row_loss_.size() >= static_cast<size_t>(rows) && !row_loss_.empty()) {
    return true;
  }
  const size_t n = std::max<size_t>(static_cast<size_t>(rows), 1);
  // The old scratch may still be read by enqueued kernels; cudaFree waits
  // for the device before releasing it.
  row_loss_.reset();
  row_correct_.reset();
  absl::StatusOr<DeviceBuffer<float>> loss = Allocate<float>(n);
  if (!loss.ok()) {
    Record(loss.status());
    return false;
  }
  absl::StatusOr<DeviceBuffer<int32_t>> correct = Allocate<int32_t>(n);
  if (!correct.ok()) {
    Record(correct.status());
    return false;
  }
  row_loss_ = *std::move(loss);
  row_correct_ = *std::move(correct);
  return true;
}

void CudaBackend::Gemm(Transpose trans_a, Transpose trans_b, int m, int n,
                       int k, float alpha, const float* a, int lda,
                       const float* b, int ldb, float beta, float* c, int ldc) {
  absl::Status s =
      CheckGemmArgs(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
  if (!s.ok()) return Record(std::move(s));
  if (m == 0 || n == 0) return;
  if (!Ok(cudaSetDevice(ordinal_), "cudaSetDevice")) return;
  Ok(cuda::BlasSgemmRowMajor(cublas_, trans_a == Transpose::kYes,
                             trans_b == Transpose::kYes, m, n, k, alpha, a, lda,
                             b, ldb, beta, c, ldc),
     "cublasSgemm");
}

void CudaBackend::BiasAdd(int rows, int cols, const float* bias, float* x) {
  absl::Status s = CheckMatrixArgs("BiasAdd", rows, cols, bias, x);
  if (!s.ok()) return Record(std::move(s));
  if (!Ok(cudaSetDevice(ordinal_), "cudaSetDevice")) return;
  Ok(cuda::LaunchBiasAdd(compute_, rows, cols, bias, x, /*relu=*/false),
     "BiasAdd");
}

void CudaBackend::BiasRelu(int rows, int cols, const float* bias, float* x) {
  absl::Status s = CheckMatrixArgs("BiasRelu", rows, cols, bias, x);
  if (!s.ok()) return Record(std::move(s));
  if (!Ok(cudaSetDevice(ordinal_), "cudaSetDevice")) return;
  Ok(cuda::LaunchBiasAdd(compute_, rows, cols, bias, x, /*relu=*/true),
     "BiasRelu");
}

void CudaBackend::Relu(size_t n, const float* x, float* y) {
  if (n > 0 && (x == nullptr || y == nullptr)) {
    return Record(absl::InvalidArgumentError("Relu: null pointer"));
  }
  if (!Ok(cudaSetDevice(ordinal_), "cudaSetDevice")) return;
  Ok(cuda::LaunchRelu(compute_, n, x, y), "Relu");
}

void CudaBackend::ReluBackward(size_t n, const float* y, const float* dy,
                               float* dx) {
  if (n > 0 && (y == nullptr || dy == nullptr || dx == nullptr)) {
    return Record(absl::InvalidArgumentError("ReluBackward: null pointer"));
  }
  if (!Ok(cudaSetDevice(ordinal_), "cudaSetDevice")) return;
  Ok(cuda::LaunchReluBackward(compute_, n, y, dy, dx), "ReluBackward");
}

void CudaBackend::SoftmaxCrossEntropy(int rows, int classes,
                                      const float* logits,
                                      const int32_t* labels, float grad_scale,
                                      float* grad_logits, XentStats* stats) {
  absl::Status s = CheckXentArgs(rows, classes, logits, labels, stats);
  if (!s.ok()) return Record(std::move(s));
  if (!Ok(cudaSetDevice(ordinal_), "cudaSetDevice")) return;
  if (!EnsureXentScratch(rows)) return;
  Ok(cuda::LaunchSoftmaxXent(compute_, rows, classes, logits, labels,
                             grad_scale, grad_logits, row_loss_.data(),
                             row_correct_.data(), stats),
     "SoftmaxCrossEntropy");
}

void CudaBackend::ColumnSums(int rows, int cols, float alpha, const float* x,
                             float beta, float* y) {
  absl::Status s = CheckMatrixArgs("ColumnSums", rows, cols, x, y);
  if (!s.ok()) return Record(std::move(s));
  if (cols > 0 && y == nullptr) {
    return Record(absl::InvalidArgumentError("ColumnSums: y is null"));
  }
  if (!Ok(cudaSetDevice(ordinal_), "cudaSetDevice")) return;
  Ok(cuda::LaunchColumnSums(compute_, rows, cols, alpha, x, beta, y),
     "ColumnSums");
}

void CudaBackend::Im2Col(const ImageShape& shape, int kernel, const float* x,
                         float* cols) {
  absl::Status s =
      CheckWindowArgs("Im2Col", WindowOp::kConv, shape, kernel, x, cols);
  if (!s.ok()) return Record(std::move(s));
  if (!Ok(cudaSetDevice(ordinal_), "cudaSetDevice")) return;
  Ok(cuda::LaunchIm2Col(compute_, shape, kernel, x, cols), "Im2Col");
}

void CudaBackend::Col2Im(const ImageShape& shape, int kernel, const float* cols,
                         float* dx) {
  absl::Status s =
      CheckWindowArgs("Col2Im", WindowOp::kConv, shape, kernel, cols, dx);
  if (!s.ok()) return Record(std::move(s));
  if (!Ok(cudaSetDevice(ordinal_), "cudaSetDevice")) return;
  Ok(cuda::LaunchCol2Im(compute_, shape, kernel, cols, dx), "Col2Im");
}

void CudaBackend::MaxPool(const ImageShape& shape, int pool, const float* x,
                          float* y, int32_t* argmax) {
  absl::Status s =
      CheckWindowArgs("MaxPool", WindowOp::kPool, shape, pool, x, y, argmax);
  if (!s.ok()) return Record(std::move(s));
  if (!Ok(cudaSetDevice(ordinal_), "cudaSetDevice")) return;
  Ok(cuda::LaunchMaxPool(compute_, shape, pool, x, y, argmax), "MaxPool");
}

void CudaBackend::MaxPoolBackward(const ImageShape& shape, int pool,
                                  const int32_t* argmax, const float* dy,
                                  float* dx) {
  absl::Status s = CheckWindowArgs("MaxPoolBackward", WindowOp::kPool, shape,
                                   pool, argmax, dy, dx);
  if (!s.ok()) return Record(std::move(s));
  if (!Ok(cudaSetDevice(ordinal_), "cudaSetDevice")) return;
  Ok(cuda::LaunchMaxPoolBackward(compute_, shape, pool, argmax, dy, dx),
     "MaxPoolBackward");
}

void CudaBackend::Axpy(size_t n, float alpha, const float* x, float* y) {
  if (n > 0 && (x == nullptr || y == nullptr)) {
    return Record(absl::InvalidArgumentError("Axpy: null pointer"));
  }
  if (!Ok(cudaSetDevice(ordinal_), "cudaSetDevice")) return;
  Ok(cuda::LaunchAxpy(compute_, n, alpha, x, y), "Axpy");
}

void CudaBackend::Scale(size_t n, float alpha, float* x) {
  if (n > 0 && x == nullptr) {
    return Record(absl::InvalidArgumentError("Scale: null pointer"));
  }
  if (!Ok(cudaSetDevice(ordinal_), "cudaSetDevice")) return;
  Ok(cuda::LaunchScale(compute_, n, alpha, x), "Scale");
}

void CudaBackend::Fill(size_t n, float value, float* x) {
  if (n > 0 && x == nullptr) {
    return Record(absl::InvalidArgumentError("Fill: null pointer"));
  }
  if (!Ok(cudaSetDevice(ordinal_), "cudaSetDevice")) return;
  Ok(cuda::LaunchFill(compute_, n, value, x), "Fill");
}

bool CudaBackend::EnsureEmbeddingFlags() {
  if (!embedding_flags_.empty()) return true;
  absl::StatusOr<DeviceBuffer<int32_t>> flags = Allocate<int32_t>(1);
  if (!flags.ok()) {
    Record(flags.status());
    return false;
  }
  if (!Ok(cudaMemsetAsync(flags->data(), 0, sizeof(int32_t), compute_),
          "cudaMemsetAsync")) {
    return false;
  }
  embedding_flags_ = *std::move(flags);
  return true;
}

void CudaBackend::CollectEmbeddingErrors() {
  embedding_pending_ = false;
  int32_t flags = 0;
  if (!Ok(cudaMemcpyAsync(&flags, embedding_flags_.data(), sizeof(flags),
                          cudaMemcpyDeviceToHost, compute_),
          "cudaMemcpyAsync(embedding flags)") ||
      !Ok(cudaStreamSynchronize(compute_), "compute stream") || flags == 0) {
    return;
  }
  // On compute_, so the next embedding call's check runs after it.
  Ok(cudaMemsetAsync(embedding_flags_.data(), 0, sizeof(flags), compute_),
     "cudaMemsetAsync(embedding flags)");
  Record(absl::InvalidArgumentError(
      absl::StrCat(device_, ": ", cuda::EmbeddingErrorMessage(flags))));
}

void CudaBackend::EmbeddingBagForward(Pooling pooling,
                                      const EmbeddingBatch& batch, int dim,
                                      const float* rows, int bags_per_row,
                                      int out_stride, float* out) {
  absl::Status s = CheckEmbeddingBagArgs(EmbeddingOp::kForward, batch, dim,
                                         rows, bags_per_row, out_stride, out);
  if (!s.ok()) return Record(std::move(s));
  if (!Ok(cudaSetDevice(ordinal_), "cudaSetDevice")) return;
  if (!EnsureEmbeddingFlags()) return;
  embedding_pending_ = true;
  // The contents are checked on the device, where they are; the kernel that
  // follows on the same stream does nothing if the check failed.
  if (!Ok(cuda::LaunchEmbeddingBagCheck(
              compute_, batch.num_bags, batch.num_rows, batch.num_indices,
              batch.offsets, batch.indices, nullptr, nullptr,
              /*inverse=*/false, embedding_flags_.data()),
          "EmbeddingBagForward check")) {
    return;
  }
  Ok(cuda::LaunchEmbeddingBagForward(compute_, pooling == Pooling::kMean,
                                     batch.num_bags, dim, batch.offsets,
                                     batch.indices, rows, bags_per_row,
                                     out_stride, out, embedding_flags_.data()),
     "EmbeddingBagForward");
}

void CudaBackend::EmbeddingBagBackward(Pooling pooling,
                                       const EmbeddingBatch& batch, int dim,
                                       const float* grad_out, int bags_per_row,
                                       int grad_out_stride, float* grad_rows) {
  absl::Status s =
      CheckEmbeddingBagArgs(EmbeddingOp::kBackward, batch, dim, grad_out,
                            bags_per_row, grad_out_stride, grad_rows);
  if (!s.ok()) return Record(std::move(s));
  if (!Ok(cudaSetDevice(ordinal_), "cudaSetDevice")) return;
  if (!EnsureEmbeddingFlags()) return;
  embedding_pending_ = true;
  if (!Ok(cuda::LaunchEmbeddingBagCheck(
              compute_, batch.num_bags, batch.num_rows, batch.num_indices,
              batch.offsets, batch.indices, batch.row_offsets,
              batch.row_occurrences, /*inverse=*/true, embedding_flags_.data()),
          "EmbeddingBagBackward check")) {
    return;
  }
  Ok(cuda::LaunchEmbeddingBagBackward(
         compute_, pooling == Pooling::kMean, batch.num_bags, batch.num_rows,
         dim, batch.offsets, batch.row_offsets, batch.row_occurrences, grad_out,
         bags_per_row, grad_out_stride, grad_rows, embedding_flags_.data()),
     "EmbeddingBagBackward");
}

absl::Status CudaBackend::Synchronize() {
  if (Ok(cudaSetDevice(ordinal_), "cudaSetDevice")) {
    Ok(cudaStreamSynchronize(copy_), "copy stream");
    Ok(cudaStreamSynchronize(compute_), "compute stream");
    if (embedding_pending_) CollectEmbeddingErrors();
  }
  return std::exchange(error_, absl::OkStatus());
}

absl::StatusOr<void*> CudaBackend::AllocateBytes(size_t bytes) {
  PS_RETURN_IF_ERROR(Activate());
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is not sticky
    return absl::ResourceExhaustedError(absl::StrCat(
        device_, ": cudaMalloc(", bytes, " bytes): ", cudaGetErrorString(e)));
  }
  return p;
}

void CudaBackend::FreeBytes(void* ptr) {
  cudaSetDevice(ordinal_);
  cudaFree(ptr);
}

absl::StatusOr<void*> CudaBackend::AllocateHostBytes(size_t bytes) {
  PS_RETURN_IF_ERROR(Activate());
  void* p = nullptr;
  const cudaError_t e = cudaMallocHost(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrCat(device_, ": cudaMallocHost(", bytes,
                     " bytes): ", cudaGetErrorString(e)));
  }
  return p;
}

void CudaBackend::FreeHostBytes(void* ptr) { cudaFreeHost(ptr); }

void CudaBackend::CopyToDeviceBytes(const void* host, size_t bytes,
                                    void* device) {
  if (bytes == 0) return;
  if (!Ok(cudaSetDevice(ordinal_), "cudaSetDevice")) return;
  // copy_ waits for earlier compute (it may still read `device`), compute
  // waits for the copy (later calls read the data).
  if (!StreamWait(copy_, compute_)) return;
  if (!Ok(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, copy_),
          "cudaMemcpyAsync(H2D)")) {
    return;
  }
  StreamWait(compute_, copy_);
}

void CudaBackend::CopyToDeviceEarlyBytes(const void* host, size_t bytes,
                                         void* device) {
  if (bytes == 0) return;
  if (!Ok(cudaSetDevice(ordinal_), "cudaSetDevice")) return;
  if (!Ok(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, copy_),
          "cudaMemcpyAsync(H2D)")) {
    return;
  }
  StreamWait(compute_, copy_);
}

void CudaBackend::CopyToHostBytes(const void* device, size_t bytes,
                                  void* host) {
  if (bytes == 0) return;
  if (!Ok(cudaSetDevice(ordinal_), "cudaSetDevice")) return;
  // Only copy_ waits: later compute overlaps the download.
  if (!StreamWait(copy_, compute_)) return;
  Ok(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, copy_),
     "cudaMemcpyAsync(D2H)");
}

void CudaBackend::CopyOnDeviceBytes(const void* src, size_t bytes, void* dst) {
  if (bytes == 0 || src == dst) return;
  if (!Ok(cudaSetDevice(ordinal_), "cudaSetDevice")) return;
  Ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, compute_),
     "cudaMemcpyAsync(D2D)");
}

absl::Status CudaBackend::PinHostBytes(void* host, size_t bytes) {
  PS_RETURN_IF_ERROR(Activate());
  const cudaError_t e = cudaHostRegister(host, bytes, cudaHostRegisterPortable);
  if (e == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();  // not sticky; clear it for the next launch's check
  if (e == cudaErrorHostMemoryAlreadyRegistered) {
    borrowed_pins_.insert(host);
    return absl::OkStatus();
  }
  return absl::InternalError(absl::StrCat(device_, ": cudaHostRegister(", bytes,
                                          " bytes): ", cudaGetErrorString(e)));
}

void CudaBackend::UnpinHostBytes(void* host) {
  if (borrowed_pins_.erase(host) > 0) return;
  cudaSetDevice(ordinal_);
  if (cudaHostUnregister(host) != cudaSuccess) cudaGetLastError();
}

}  // namespace ps
