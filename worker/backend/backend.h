// The compute interface that models are written against, once, for every
// device: CPU (OpenBLAS) and CUDA (cuBLAS + kernels).
//
// A Backend is one device ("cpu:0", "gpu:1"). Memory it allocates is
// "backend memory" (device memory on a GPU, ordinary host memory on the CPU)
// and is owned by a move-only DeviceBuffer<T>. Compute and copy calls are
// *enqueued*: they run in call order on the device's stream and complete at
// Synchronize(), which also reports the first error since the last
// Synchronize() (bad arguments, a failed launch). On the CPU they simply run
// at once.
//
//   std::unique_ptr<Backend> b = ...;               // see backend_factory.h
//   absl::StatusOr<DeviceBuffer<float>> a = b->Allocate<float>(m * k);
//   b->CopyToDevice(host_a, m * k, a->data());
//   b->Gemm(Transpose::kNo, Transpose::kNo, m, n, k, 1.0f, a->data(), k,
//           w.data(), n, 0.0f, c.data(), n);
//   b->CopyToHost(c.data(), m * n, host_c);
//   absl::Status s = b->Synchronize();              // host_c now valid
//
// Thread-safety: a Backend is thread-compatible, not thread-safe: one thread
// drives it (the trainer runs one thread per device). Distinct Backend
// objects may be used concurrently from different threads.

#ifndef WORKER_BACKEND_BACKEND_H_
#define WORKER_BACKEND_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "worker/backend/direct_conv.h"
#include "worker/backend/elementwise.h"

namespace ps {

class Backend;

// Whether a Gemm operand is used as stored or transposed.
enum class Transpose { kNo, kYes };

// `size` elements of T in one backend's memory; frees them on destruction.
// Move-only. Must not outlive the Backend that allocated it. data() is a
// backend-memory pointer: dereference it on the host only when
// Backend::host_memory() is true.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Frees the memory now; the buffer becomes empty.
  void reset();

 private:
  friend class Backend;
  DeviceBuffer(Backend* owner, T* data, size_t size)
      : owner_(owner), data_(data), size_(size) {}

  Backend* owner_ = nullptr;
  T* data_ = nullptr;
  size_t size_ = 0;
};

// `size` elements of T in host memory suited to fast asynchronous copies to
// and from its backend (page-locked for CUDA, plain aligned memory on the
// CPU). Move-only; must not outlive its Backend.
template <typename T>
class HostBuffer {
 public:
  HostBuffer() = default;
  ~HostBuffer() { reset(); }
  HostBuffer(HostBuffer&& other) noexcept { *this = std::move(other); }
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  T* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  void reset();

 private:
  friend class Backend;
  HostBuffer(Backend* owner, T* data, size_t size)
      : owner_(owner), data_(data), size_(size) {}

  Backend* owner_ = nullptr;
  T* data_ = nullptr;
  size_t size_ = 0;
};

// How EmbeddingBagForward pools the rows of a bag.
enum class Pooling {
  kSum,   // the sum of the bag's rows
  kMean,  // that sum divided by the bag's size; an empty bag gives 0
};

// One batch of embedding bags over `num_rows` unique rows, in backend memory
// (worker/model/id_dedup.h builds the host side). All int32:
//   offsets [num_bags + 1]: bag b holds occurrences [offsets[b],
//       offsets[b + 1]); offsets[0] == 0, non-decreasing, offsets[num_bags]
//       == num_indices (a bag may be empty).
//   indices [num_indices]: occurrence p reads unique row indices[p], in
//       [0, num_rows).
//   row_offsets [num_rows + 1], row_occurrences [num_indices]: the inverse of
//       indices in CSR form: unique row u is read by the occurrences
//       row_occurrences[row_offsets[u] .. row_offsets[u + 1]), ascending.
//       Only EmbeddingBagBackward reads them (they may be null for Forward).
// num_bags == 0 requires num_indices == 0; arrays of zero elements may be
// null.
struct EmbeddingBatch {
  int num_bags = 0;
  int num_rows = 0;
  int num_indices = 0;
  const int32_t* offsets = nullptr;
  const int32_t* indices = nullptr;
  const int32_t* row_offsets = nullptr;
  const int32_t* row_occurrences = nullptr;
};

// One device. All matrices are ROW-MAJOR with a leading dimension (the
// distance between rows, >= the stored column count). Pointers passed to the
// compute calls are backend memory. Preconditions that the backend cannot
// check (buffer extents) are the caller's; those it can (negative sizes, a
// leading dimension too small) make the call a no-op and the next
// Synchronize() return kInvalidArgument naming the argument.
class Backend {
 public:
  virtual ~Backend() = default;

  // The device string this backend was created for, e.g. "cpu:0".
  virtual const std::string& device() const = 0;

  // True when backend memory is ordinary host memory (the CPU backend):
  // callers may then hand host pointers straight to the compute calls and
  // skip copies. Models use this to run the CPU path copy-free.
  virtual bool host_memory() const = 0;

  // Allocates n elements (uninitialised). n == 0 gives an empty buffer.
  // kResourceExhausted when the device is out of memory.
  template <typename T>
  absl::StatusOr<DeviceBuffer<T>> Allocate(size_t n);

  // Allocates n elements of host memory for fast async copies.
  template <typename T>
  absl::StatusOr<HostBuffer<T>> AllocateHost(size_t n);

  // Enqueues host -> backend. Later calls see the data. `host` must stay
  // valid and unchanged until Synchronize(); the copy is truly asynchronous
  // (overlapping compute) when `host` is a HostBuffer.
  template <typename T>
  void CopyToDevice(const T* host, size_t n, T* device) {
    CopyToDeviceBytes(host, n * sizeof(T), device);
  }

  // As CopyToDevice, but the copy does not wait for previously enqueued work
  // (only later calls wait for it), so it overlaps that work: upload layer
  // l+1's weights while layer l computes. The caller guarantees that no
  // unfinished enqueued call reads or writes `device`.
  template <typename T>
  void CopyToDeviceEarly(const T* host, size_t n, T* device) {
    CopyToDeviceEarlyBytes(host, n * sizeof(T), device);
  }

  // Enqueues backend -> host after all previously enqueued work. `host` is
  // valid after Synchronize(). The copy may overlap LATER compute, so later
  // calls before Synchronize() must not write `device`.
  template <typename T>
  void CopyToHost(const T* device, size_t n, T* host) {
    CopyToHostBytes(device, n * sizeof(T), host);
  }

  // Pins [host, host + bytes) of the caller's memory for direct asynchronous
  // copies to and from this device (CUDA: cudaHostRegister) until
  // UnpinHost(host) or the backend's end. Model then uploads parameters from
  // such memory and downloads gradients into it without its staging copy
  // (IsPinned). Where host_memory() there are no copies to save: OK, nothing
  // pinned. The memory must outlive the pin and ranges must not overlap
  // (kInvalidArgument). An error leaves nothing pinned; callers may go on
  // unpinned, only slower.
  absl::Status PinHost(void* host, size_t bytes);
  // Ends PinHost(host, ...); a pointer that is not pinned is ignored.
  void UnpinHost(void* host);
  // Whether [host, host + bytes) lies inside one range pinned by PinHost.
  bool IsPinned(const void* host, size_t bytes) const;

  // Enqueues backend -> backend (same device), ordered like compute.
  template <typename T>
  void CopyOnDevice(const T* src, size_t n, T* dst) {
    CopyOnDeviceBytes(src, n * sizeof(T), dst);
  }

  // C[m x n] = alpha * op(A) * op(B) + beta * C, op(A) m x k, op(B) k x n.
  // lda/ldb/ldc are the row strides of A, B, C as stored. beta == 0 ignores
  // C's old contents (NaNs included).
  virtual void Gemm(Transpose trans_a, Transpose trans_b, int m, int n, int k,
                    float alpha, const float* a, int lda, const float* b,
                    int ldb, float beta, float* c, int ldc) = 0;

  // x[r][c] += bias[c] for a dense rows x cols matrix.
  virtual void BiasAdd(int rows, int cols, const float* bias, float* x) = 0;

  // x[r][c] = max(x[r][c] + bias[c], 0): the fused dense-layer epilogue.
  virtual void BiasRelu(int rows, int cols, const float* bias, float* x) = 0;

  // y = max(x, 0); y may alias x.
  virtual void Relu(size_t n, const float* x, float* y) = 0;

  // dx = (y > 0) ? dy : 0 where y is the ReLU's OUTPUT; dx may alias dy.
  virtual void ReluBackward(size_t n, const float* y, const float* dy,
                            float* dx) = 0;

  // Softmax cross-entropy of dense rows x classes logits against labels
  // (backend memory, each in [0, classes): callers validate). Writes
  // *stats = {sum of row losses (summed in double), rows whose first
  // arg-max is the label}; `stats` is one element of backend memory. When
  // grad_logits is not null it receives grad_scale * (softmax - onehot),
  // rows x classes dense (it may not alias logits).
  virtual void SoftmaxCrossEntropy(int rows, int classes, const float* logits,
                                   const int32_t* labels, float grad_scale,
                                   float* grad_logits, XentStats* stats) = 0;

  // y[c] = alpha * sum_r x[r][c] + beta * y[c] (dense rows x cols): the bias
  // gradient. beta == 0 ignores y's old contents.
  virtual void ColumnSums(int rows, int cols, float alpha, const float* x,
                          float beta, float* y) = 0;

  // ---- Convolution (im2col + Gemm) and max pooling -----------------------
  // Images are NHWC (ImageShape, elementwise.h). Sizes must be >= 0,
  // `kernel` odd and >= 1, `pool` >= 1; batch * height * width and kernel^2
  // * channels must fit in int. Each output element is computed by one
  // thread from its inputs (elementwise.h), never with atomics: every
  // backend gives the same bits.

  // cols [batch * height * width x kernel^2 * channels] (row-major, dense) =
  // the patches of a kernel x kernel "same" convolution (zero padding
  // (kernel - 1) / 2, stride 1): row (n, y, x), column (c * kernel + i) *
  // kernel + j. With W [kernel^2 * channels x filters], Gemm(cols, W) is the
  // convolution, NHWC. cols must not overlap x.
  virtual void Im2Col(const ImageShape& shape, int kernel, const float* x,
                      float* cols) = 0;

  // The adjoint of Im2Col: dx (NHWC, `shape`) = for each input element the
  // sum of the cols entries Im2Col would copy from it (elementwise::
  // Col2ImAt). Overwrites dx, which must not overlap cols.
  virtual void Col2Im(const ImageShape& shape, int kernel, const float* cols,
                      float* dx) = 0;

  // pool x pool max pooling with stride pool: y [batch, height / pool,
  // width / pool, channels] (rows and columns past the last whole window are
  // dropped); argmax (int32, one per y element) receives the position i *
  // pool + j of each window's first maximum, for MaxPoolBackward.
  virtual void MaxPool(const ImageShape& shape, int pool, const float* x,
                       float* y, int32_t* argmax) = 0;

  // dx (the input's shape) = dy at each window's argmax, 0 elsewhere.
  // Overwrites dx.
  virtual void MaxPoolBackward(const ImageShape& shape, int pool,
                               const int32_t* argmax, const float* dy,
                               float* dx) = 0;

  // Direct convolution kernels for `shape` when this backend has them and
  // they beat its Im2Col + Gemm at that shape (measured when asked), else
  // null. *choice (when not null) receives a one-line account of what was
  // chosen and why, for the start log. The default has none.
  virtual std::unique_ptr<DirectConv> CreateDirectConv(
      const DirectConvShape& shape, std::string* choice) {
    (void)shape;
    if (choice != nullptr) choice->clear();
    return nullptr;
  }

  // Picks this backend's fastest Gemm kernel for one shape, once, before the
  // calls: m, n, k as a later Gemm's, with the batch dimension (m when A is
  // not transposed, k when it is) at the row count the calls will mostly
  // have. The choice holds for every later Gemm with the same transposes
  // and the same other two dimensions, whatever its batch dimension; shapes
  // never prepared run the default kernel. Returns a one-line account for
  // the start log, or "" when there is no choice to make (the default).
  virtual std::string PrepareGemm(Transpose trans_a, Transpose trans_b, int m,
                                  int n, int k) {
    (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k;
    return "";
  }

  // y += alpha * x.
  virtual void Axpy(size_t n, float alpha, const float* x, float* y) = 0;

  // x *= alpha.
  virtual void Scale(size_t n, float alpha, float* x) = 0;

  // x[i] = value.
  virtual void Fill(size_t n, float value, float* x) = 0;

  // Embedding-bag pooling. `rows` is [batch.num_rows x dim] dense. Bag i's
  // dim outputs go to row i / bags_per_row, columns from
  // (i % bags_per_row) * dim, of the row-major matrix `out` with row stride
  // out_stride (>= bags_per_row * dim): with bags ordered (example, field)
  // and bags_per_row = fields, the fields' embeddings land side by side in
  // one [examples x out_stride] activation, at any column offset the caller
  // gives `out`. Other columns of out are not touched; out must not overlap
  // rows. Each output element sums its bag's rows in occurrence order from
  // 0.0f, then kMean divides by the bag's size (a division, never a
  // multiplication by the reciprocal, so no backend can fuse it into an FMA):
  // every backend gives the same bits. Bad sizes or pointers, and bad
  // contents of offsets or indices (see EmbeddingBatch), make the call a no-op
  // and the next Synchronize() return kInvalidArgument; on a device the
  // contents are checked there, and after such an error later embedding
  // calls up to that Synchronize() are no-ops too.
  virtual void EmbeddingBagForward(Pooling pooling, const EmbeddingBatch& batch,
                                   int dim, const float* rows, int bags_per_row,
                                   int out_stride, float* out) = 0;

  // The gradient of EmbeddingBagForward with respect to `rows`:
  // grad_rows[u] ([batch.num_rows x dim] dense) = the sum over u's
  // occurrences p, in ascending p (batch.row_offsets/row_occurrences), of
  // grad_out's entry for p's bag (laid out as Forward's out, with
  // grad_out_stride), divided by the bag's size for kMean. Each element is
  // summed from 0.0f in that order by one thread, never with atomics, so the
  // result is deterministic and the same bits on every backend, for kSum and
  // kMean alike. A row with no occurrences gets 0. Reads the whole batch and
  // also checks that the row CSR is exactly the inverse of indices (strictly
  // ascending per row, indices[row_occurrences[k]] == its row); errors as
  // for Forward. grad_rows must not overlap grad_out.
  virtual void EmbeddingBagBackward(Pooling pooling,
                                    const EmbeddingBatch& batch, int dim,
                                    const float* grad_out, int bags_per_row,
                                    int grad_out_stride, float* grad_rows) = 0;

  // Blocks until all enqueued work and copies are done. Returns the first
  // error since the previous Synchronize() (and clears it), else OK.
  virtual absl::Status Synchronize() = 0;

 protected:
  // Raw memory hooks behind Allocate/AllocateHost/Copy*. AllocateBytes and
  // AllocateHostBytes are never called with 0 bytes.
  virtual absl::StatusOr<void*> AllocateBytes(size_t bytes) = 0;
  virtual void FreeBytes(void* ptr) = 0;
  virtual absl::StatusOr<void*> AllocateHostBytes(size_t bytes) = 0;
  virtual void FreeHostBytes(void* ptr) = 0;
  virtual void CopyToDeviceBytes(const void* host, size_t bytes,
                                 void* device) = 0;
  virtual void CopyToDeviceEarlyBytes(const void* host, size_t bytes,
                                      void* device) = 0;
  virtual void CopyToHostBytes(const void* device, size_t bytes,
                               void* host) = 0;
  virtual void CopyOnDeviceBytes(const void* src, size_t bytes, void* dst) = 0;
  // The device's side of PinHost/UnpinHost; by default nothing is needed
  // (a backend whose copies read host memory when they run, as
  // DeferredBackend's, keeps the bookkeeping only).
  virtual absl::Status PinHostBytes(void* host, size_t bytes) {
    return absl::OkStatus();
  }
  virtual void UnpinHostBytes(void* host) {}
  // Unpins every range still pinned: for a backend's destructor, while its
  // device is still there to unpin with.
  void UnpinAllHost();

 private:
  template <typename T>
  friend class DeviceBuffer;
  template <typename T>
  friend class HostBuffer;

  mutable absl::Mutex pin_mu_;
  // [begin, begin + bytes) of each pinned range.
  std::vector<std::pair<const char*, size_t>> pinned_ ABSL_GUARDED_BY(pin_mu_);
};

// Sums a gradient across the devices of one machine, in place, on the
// devices (e.g. NCCL across GPUs; see cuda/gpu_reducer.h and
// CreateGpuReducer in backend_factory.h). Rank r is the r-th backend given at
// creation.
class LocalReducer {
 public:
  virtual ~LocalReducer() = default;

  virtual int num_ranks() const = 0;

  // Enqueues, on rank's backend, an in-place sum of the n floats at `data`
  // (that backend's memory) across all ranks; complete at that backend's
  // Synchronize(). Every rank must make the same sequence of calls with the
  // same n, each rank from its own thread concurrently (a rank's call may
  // wait for the others to join). kInvalidArgument for a bad rank.
  virtual absl::Status AllReduceSum(int rank, float* data, size_t n) = 0;

  // Blocks until everything enqueued on rank's backend (its sums included)
  // is complete, but never past `deadline`: a rank whose peers fail or never
  // join would otherwise wait forever. Errors: kInternal for the reducer's
  // asynchronous error (a failed peer, a NCCL failure), kDeadlineExceeded
  // when the deadline passes first; either way rank's communicator is
  // aborted and the reducer's later calls for rank fail with
  // kFailedPrecondition. Called from rank's thread.
  virtual absl::Status Wait(int rank, absl::Time deadline) = 0;
};

// ---- implementation details ------------------------------------------------

template <typename T>
DeviceBuffer<T>& DeviceBuffer<T>::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    owner_ = std::exchange(other.owner_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

template <typename T>
void DeviceBuffer<T>::reset() {
  if (data_ != nullptr) owner_->FreeBytes(data_);
  owner_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

template <typename T>
HostBuffer<T>& HostBuffer<T>::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    owner_ = std::exchange(other.owner_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

template <typename T>
void HostBuffer<T>::reset() {
  if (data_ != nullptr) owner_->FreeHostBytes(data_);
  owner_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

template <typename T>
absl::StatusOr<DeviceBuffer<T>> Backend::Allocate(size_t n) {
  static_assert(std::is_trivially_copyable<T>::value,
                "backend memory holds trivially copyable types only");
  if (n == 0) return DeviceBuffer<T>();
  if (n > SIZE_MAX / sizeof(T)) {
    return absl::InvalidArgumentError("Allocate: element count overflows");
  }
  PS_ASSIGN_OR_RETURN(void* p, AllocateBytes(n * sizeof(T)));
  return DeviceBuffer<T>(this, static_cast<T*>(p), n);
}

template <typename T>
absl::StatusOr<HostBuffer<T>> Backend::AllocateHost(size_t n) {
  static_assert(std::is_trivially_copyable<T>::value,
                "host buffers hold trivially copyable types only");
  if (n == 0) return HostBuffer<T>();
  if (n > SIZE_MAX / sizeof(T)) {
    return absl::InvalidArgumentError("AllocateHost: element count overflows");
  }
  PS_ASSIGN_OR_RETURN(void* p, AllocateHostBytes(n * sizeof(T)));
  return HostBuffer<T>(this, static_cast<T*>(p), n);
}

}  // namespace ps

#endif  // WORKER_BACKEND_BACKEND_H_
