#include "worker/backend/deferred_backend.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ps {
namespace {

// Bytes a row-major rows x cols operand with leading dimension ld spans.
size_t Extent(int rows, int cols, int ld) {
  if (rows <= 0 || cols <= 0) return 0;
  return ((static_cast<size_t>(rows) - 1) * ld + cols) * sizeof(float);
}

// Bytes of n int32 elements (0 for n <= 0).
size_t Int32Bytes(int64_t n) {
  return n > 0 ? static_cast<size_t>(n) * sizeof(int32_t) : 0;
}

// Bytes an embedding-bag output of num_bags bags spans (its last bag's end).
size_t BagOutputBytes(int num_bags, int bags_per_row, int stride, int dim) {
  if (num_bags <= 0) return 0;
  return (elementwise::BagOutputOffset(num_bags - 1, bags_per_row, stride,
                                       dim) +
          dim) *
         sizeof(float);
}

}  // namespace

DeferredBackend::DeferredBackend(std::string device)
    : device_(std::move(device)) {
  // blas_threads 0: leave the process-wide OpenBLAS setting alone.
  cpu_ = *CpuBackend::Create(0, 0);
}

DeferredBackend::~DeferredBackend() = default;

bool DeferredBackend::OnDevice(const void* p, size_t bytes) const {
  if (bytes == 0) return true;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  auto it = allocations_.upper_bound(addr);
  if (it == allocations_.begin()) return false;
  --it;
  return addr >= it->first && addr + bytes <= it->first + it->second;
}

bool DeferredBackend::Check(bool ok, const char* op, const char* what) {
  if (!ok && error_.ok()) {
    error_ =
        absl::InvalidArgumentError(absl::StrCat(device_, ": ", op, ": ", what));
  }
  return ok;
}

void DeferredBackend::Enqueue(std::function<void()> call) {
  queue_.push_back(std::move(call));
}

void DeferredBackend::Gemm(Transpose trans_a, Transpose trans_b, int m, int n,
                           int k, float alpha, const float* a, int lda,
                           const float* b, int ldb, float beta, float* c,
                           int ldc) {
  const bool na = trans_a == Transpose::kNo, nb = trans_b == Transpose::kNo;
  const bool touches = m > 0 && n > 0;
  const bool reads = touches && k > 0;
  if (!Check(!reads || OnDevice(a, Extent(na ? m : k, na ? k : m, lda)), "Gemm",
             "a outside device allocations") ||
      !Check(!reads || OnDevice(b, Extent(nb ? k : n, nb ? n : k, ldb)), "Gemm",
             "b outside device allocations") ||
      !Check(!touches || OnDevice(c, Extent(m, n, ldc)), "Gemm",
             "c outside device allocations")) {
    return;
  }
  Enqueue([=] {
    cpu_->Gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  });
}

void DeferredBackend::BiasAdd(int rows, int cols, const float* bias, float* x) {
  if (!Check(OnDevice(bias, Extent(1, cols, cols)), "BiasAdd",
             "bias outside device allocations") ||
      !Check(OnDevice(x, Extent(rows, cols, cols)), "BiasAdd",
             "x outside device allocations")) {
    return;
  }
  Enqueue([=] { cpu_->BiasAdd(rows, cols, bias, x); });
}

void DeferredBackend::BiasRelu(int rows, int cols, const float* bias,
                               float* x) {
  if (!Check(OnDevice(bias, Extent(1, cols, cols)), "BiasRelu",
             "bias outside device allocations") ||
      !Check(OnDevice(x, Extent(rows, cols, cols)), "BiasRelu",
             "x outside device allocations")) {
    return;
  }
  Enqueue([=] { cpu_->BiasRelu(rows, cols, bias, x); });
}

void DeferredBackend::Relu(size_t n, const float* x, float* y) {
  if (!Check(OnDevice(x, n * sizeof(float)), "Relu",
             "x outside device allocations") ||
      !Check(OnDevice(y, n * sizeof(float)), "Relu",
             "y outside device allocations")) {
    return;
  }
  Enqueue([=] { cpu_->Relu(n, x, y); });
}

void DeferredBackend::ReluBackward(size_t n, const float* y, const float* dy,
                                   float* dx) {
  const size_t bytes = n * sizeof(float);
  if (!Check(OnDevice(y, bytes), "ReluBackward",
             "y outside device allocations") ||
      !Check(OnDevice(dy, bytes), "ReluBackward",
             "dy outside device allocations") ||
      !Check(OnDevice(dx, bytes), "ReluBackward",
             "dx outside device allocations")) {
    return;
  }
  Enqueue([=] { cpu_->ReluBackward(n, y, dy, dx); });
}

void DeferredBackend::SoftmaxCrossEntropy(int rows, int classes,
                                          const float* logits,
                                          const int32_t* labels,
                                          float grad_scale, float* grad_logits,
                                          XentStats* stats) {
  const size_t matrix = Extent(rows, classes, classes);
  if (!Check(OnDevice(logits, matrix), "SoftmaxCrossEntropy",
             "logits outside device allocations") ||
      !Check(OnDevice(labels, rows > 0 ? rows * sizeof(int32_t) : 0),
             "SoftmaxCrossEntropy", "labels outside device allocations") ||
      !Check(grad_logits == nullptr || OnDevice(grad_logits, matrix),
             "SoftmaxCrossEntropy", "grad_logits outside device allocations") ||
      !Check(OnDevice(stats, sizeof(XentStats)), "SoftmaxCrossEntropy",
             "stats outside device allocations")) {
    return;
  }
  Enqueue([=] {
    cpu_->SoftmaxCrossEntropy(rows, classes, logits, labels, grad_scale,
                              grad_logits, stats);
  });
}

void DeferredBackend::ColumnSums(int rows, int cols, float alpha,
                                 const float* x, float beta, float* y) {
  if (!Check(OnDevice(x, Extent(rows, cols, cols)), "ColumnSums",
             "x outside device allocations") ||
      !Check(OnDevice(y, Extent(1, cols, cols)), "ColumnSums",
             "y outside device allocations")) {
    return;
  }
  Enqueue([=] { cpu_->ColumnSums(rows, cols, alpha, x, beta, y); });
}

bool DeferredBackend::CheckWindow(const char* op, WindowOp kind,
                                  const ImageShape& shape, int window,
                                  const void* const (&arrays)[3],
                                  const size_t (&bytes)[3]) {
  absl::Status s =
      CheckWindowArgs(op, kind, shape, window, arrays[0], arrays[1], arrays[2]);
  if (!s.ok()) {
    if (error_.ok()) error_ = std::move(s);
    return false;
  }
  for (int i = 0; i < 3; ++i) {
    if (arrays[i] != nullptr && !Check(OnDevice(arrays[i], bytes[i]), op,
                                       "an array outside device allocations")) {
      return false;
    }
  }
  return true;
}

void DeferredBackend::Im2Col(const ImageShape& shape, int kernel,
                             const float* x, float* cols) {
  const size_t image = ImageElements(shape) * sizeof(float);
  if (!CheckWindow("Im2Col", WindowOp::kConv, shape, kernel, {x, cols, nullptr},
                   {image, image * kernel * kernel, 0})) {
    return;
  }
  Enqueue([=] { cpu_->Im2Col(shape, kernel, x, cols); });
}

void DeferredBackend::Col2Im(const ImageShape& shape, int kernel,
                             const float* cols, float* dx) {
  const size_t image = ImageElements(shape) * sizeof(float);
  if (!CheckWindow("Col2Im", WindowOp::kConv, shape, kernel,
                   {cols, dx, nullptr}, {image * kernel * kernel, image, 0})) {
    return;
  }
  Enqueue([=] { cpu_->Col2Im(shape, kernel, cols, dx); });
}

void DeferredBackend::MaxPool(const ImageShape& shape, int pool, const float* x,
                              float* y, int32_t* argmax) {
  const size_t pooled = PooledElements(shape, pool);
  if (!CheckWindow("MaxPool", WindowOp::kPool, shape, pool, {x, y, argmax},
                   {ImageElements(shape) * sizeof(float),
                    pooled * sizeof(float), pooled * sizeof(int32_t)})) {
    return;
  }
  Enqueue([=] { cpu_->MaxPool(shape, pool, x, y, argmax); });
}

void DeferredBackend::MaxPoolBackward(const ImageShape& shape, int pool,
                                      const int32_t* argmax, const float* dy,
                                      float* dx) {
  const size_t pooled = PooledElements(shape, pool);
  if (!CheckWindow("MaxPoolBackward", WindowOp::kPool, shape, pool,
                   {argmax, dy, dx},
                   {pooled * sizeof(int32_t), pooled * sizeof(float),
                    ImageElements(shape) * sizeof(float)})) {
    return;
  }
  Enqueue([=] { cpu_->MaxPoolBackward(shape, pool, argmax, dy, dx); });
}

void DeferredBackend::Axpy(size_t n, float alpha, const float* x, float* y) {
  if (!Check(OnDevice(x, n * sizeof(float)), "Axpy",
             "x outside device allocations") ||
      !Check(OnDevice(y, n * sizeof(float)), "Axpy",
             "y outside device allocations")) {
    return;
  }
  Enqueue([=] { cpu_->Axpy(n, alpha, x, y); });
}

void DeferredBackend::Scale(size_t n, float alpha, float* x) {
  if (!Check(OnDevice(x, n * sizeof(float)), "Scale",
             "x outside device allocations"))
    return;
  Enqueue([=] { cpu_->Scale(n, alpha, x); });
}

void DeferredBackend::Fill(size_t n, float value, float* x) {
  if (!Check(OnDevice(x, n * sizeof(float)), "Fill",
             "x outside device allocations"))
    return;
  Enqueue([=] { cpu_->Fill(n, value, x); });
}

bool DeferredBackend::CheckEmbeddingBatch(EmbeddingOp op,
                                          const EmbeddingBatch& batch, int dim,
                                          const void* in, int bags_per_row,
                                          int stride, const void* out) {
  absl::Status s =
      CheckEmbeddingBagArgs(op, batch, dim, in, bags_per_row, stride, out);
  if (!s.ok()) {
    if (error_.ok()) error_ = std::move(s);
    return false;
  }
  const bool backward = op == EmbeddingOp::kBackward;
  const char* name = backward ? "EmbeddingBagBackward" : "EmbeddingBagForward";
  const size_t table =
      static_cast<size_t>(batch.num_rows) * dim * sizeof(float);
  const size_t bags = BagOutputBytes(batch.num_bags, bags_per_row, stride, dim);
  return Check(
             OnDevice(batch.offsets,
                      batch.num_bags > 0 ? Int32Bytes(batch.num_bags + 1) : 0),
             name, "offsets outside device allocations") &&
         Check(OnDevice(batch.indices, Int32Bytes(batch.num_indices)), name,
               "indices outside device allocations") &&
         Check(
             !backward || OnDevice(batch.row_offsets,
                                   batch.num_rows > 0
                                       ? Int32Bytes(int64_t{batch.num_rows} + 1)
                                       : 0),
             name, "row_offsets outside device allocations") &&
         Check(!backward || OnDevice(batch.row_occurrences,
                                     Int32Bytes(batch.num_indices)),
               name, "row_occurrences outside device allocations") &&
         Check(OnDevice(in,
                        backward ? bags : (batch.num_indices > 0 ? table : 0)),
               name,
               backward ? "grad_out outside device allocations"
                        : "rows outside device allocations") &&
         Check(OnDevice(out, backward ? table : bags), name,
               backward ? "grad_rows outside device allocations"
                        : "out outside device allocations");
}

void DeferredBackend::EmbeddingBagForward(Pooling pooling,
                                          const EmbeddingBatch& batch, int dim,
                                          const float* rows, int bags_per_row,
                                          int out_stride, float* out) {
  if (!CheckEmbeddingBatch(EmbeddingOp::kForward, batch, dim, rows,
                           bags_per_row, out_stride, out)) {
    return;
  }
  // `batch` by value: its arrays are read when the call runs.
  Enqueue([=] {
    cpu_->EmbeddingBagForward(pooling, batch, dim, rows, bags_per_row,
                              out_stride, out);
  });
}

void DeferredBackend::EmbeddingBagBackward(Pooling pooling,
                                           const EmbeddingBatch& batch, int dim,
                                           const float* grad_out,
                                           int bags_per_row,
                                           int grad_out_stride,
                                           float* grad_rows) {
  if (!CheckEmbeddingBatch(EmbeddingOp::kBackward, batch, dim, grad_out,
                           bags_per_row, grad_out_stride, grad_rows)) {
    return;
  }
  Enqueue([=] {
    cpu_->EmbeddingBagBackward(pooling, batch, dim, grad_out, bags_per_row,
                               grad_out_stride, grad_rows);
  });
}

absl::Status DeferredBackend::Synchronize() {
  std::vector<std::function<void()>> queue = std::move(queue_);
  queue_.clear();
  for (std::function<void()>& call : queue) {
    call();
    ++calls_run_;
  }
  absl::Status cpu = cpu_->Synchronize();
  if (error_.ok()) error_ = std::move(cpu);
  return std::exchange(error_, absl::OkStatus());
}

absl::StatusOr<void*> DeferredBackend::AllocateBytes(size_t bytes) {
  void* p = std::malloc(bytes);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(device_, ": cannot allocate ", bytes, " bytes"));
  }
  allocations_[reinterpret_cast<uintptr_t>(p)] = bytes;
  return p;
}

void DeferredBackend::FreeBytes(void* ptr) {
  allocations_.erase(reinterpret_cast<uintptr_t>(ptr));
  std::free(ptr);
}

absl::StatusOr<void*> DeferredBackend::AllocateHostBytes(size_t bytes) {
  void* p = std::malloc(bytes);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(device_, ": cannot allocate ", bytes, " host bytes"));
  }
  return p;
}

void DeferredBackend::FreeHostBytes(void* ptr) { std::free(ptr); }

void DeferredBackend::CopyToDeviceBytes(const void* host, size_t bytes,
                                        void* device) {
  if (!Check(OnDevice(device, bytes), "CopyToDevice",
             "device outside device allocations") ||
      !Check(bytes == 0 || !OnDevice(host, 1), "CopyToDevice",
             "host is device memory")) {
    return;
  }
  if (IsPinned(host, bytes)) pinned_copy_bytes_ += bytes;
  // Reads `host` when it runs, at Synchronize(), like an async copy.
  Enqueue([=] { std::memcpy(device, host, bytes); });
}

void DeferredBackend::CopyToDeviceEarlyBytes(const void* host, size_t bytes,
                                             void* device) {
  CopyToDeviceBytes(host, bytes, device);
}

void DeferredBackend::CopyToHostBytes(const void* device, size_t bytes,
                                      void* host) {
  if (!Check(OnDevice(device, bytes), "CopyToHost",
             "device outside device allocations") ||
      !Check(bytes == 0 || !OnDevice(host, 1), "CopyToHost",
             "host is device memory")) {
    return;
  }
  if (IsPinned(host, bytes)) pinned_copy_bytes_ += bytes;
  Enqueue([=] { std::memcpy(host, device, bytes); });
}

void DeferredBackend::CopyOnDeviceBytes(const void* src, size_t bytes,
                                        void* dst) {
  if (!Check(OnDevice(src, bytes), "CopyOnDevice",
             "src outside device allocations") ||
      !Check(OnDevice(dst, bytes), "CopyOnDevice",
             "dst outside device allocations")) {
    return;
  }
  Enqueue([=] { std::memmove(dst, src, bytes); });
}

}  // namespace ps
