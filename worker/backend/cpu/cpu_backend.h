// The CPU backend: OpenBLAS sgemm through CBLAS, oneDNN's convolutions and
// sgemm where they are faster (CpuKernels), plus vectorisable loops over the
// shared element-wise math (worker/backend/elementwise.h).
//
// Backend memory is host memory (host_memory() is true): Allocate is an
// aligned malloc, copies are memcpy, every call runs to completion before it
// returns, and Synchronize() only reports errors.
//
//   absl::StatusOr<std::unique_ptr<CpuBackend>> b =
//       CpuBackend::Create(/*index=*/0, /*blas_threads=*/1);
//
// Threads. OpenBLAS (pthread build) keeps ONE process-wide thread count:
// openblas_set_num_threads() affects every CpuBackend in the process, the last
// call wins. Create() sets it when blas_threads > 0, so create all backends
// (with the same value) before device threads start. With K replicas on C
// cores, blas_threads = max(1, C / K) keeps the machine busy without
// oversubscription. Concurrent calls from K threads into distinct CpuBackends
// are safe: OpenBLAS's pthread build serialises its thread pool internally,
// and with blas_threads == 1 each call runs on its caller's thread. oneDNN
// (OpenMP build) runs each call with blas_threads OpenMP threads of the
// calling thread (OpenBLAS's count when blas_threads is 0).
//
// Kernels. With CpuKernels::kAuto, CreateDirectConv and PrepareGemm time
// oneDNN against Im2Col + OpenBLAS (or OpenBLAS sgemm) at the asked shape and
// keep the faster, once; the account they return goes to the start log. A
// timed choice can differ between runs on a loaded machine, and the two
// kernels differ in the last bits, so a backend given KernelChoices
// (kernel_choices.h) looks the shape up there first and records what it
// timed: every later run on the machine, and every replica sharing the
// table, computes with the same kernels. Given the choice and the thread
// count, every call gives the same bits each run.

#ifndef WORKER_BACKEND_CPU_CPU_BACKEND_H_
#define WORKER_BACKEND_CPU_CPU_BACKEND_H_

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/backend/backend.h"
#include "worker/backend/cpu/embedding_loops.h"
#include "worker/backend/cpu/kernel_choices.h"

namespace ps {

// Which kernels the CPU backend runs where oneDNN and OpenBLAS both can.
enum class CpuKernels {
  kOpenBlas,  // Im2Col + OpenBLAS sgemm everywhere: the reference
  kOneDnn,    // oneDNN's convolutions and sgemm wherever asked
  kAuto,      // per shape, whichever measures faster when asked
};

// "openblas", "onednn", "auto" (the config spelling) and back.
const char* CpuKernelsName(CpuKernels kernels);
absl::StatusOr<CpuKernels> ParseCpuKernels(absl::string_view name);

// Thread-compatible (one thread drives it); see the file comment for OpenBLAS
// threading.
class CpuBackend final : public Backend {
 public:
  // A backend named "cpu:<index>". blas_threads > 0 sets OpenBLAS's
  // process-wide thread count; 0 leaves it as it is (OPENBLAS_NUM_THREADS or
  // all cores). `kernels` picks oneDNN or OpenBLAS (see the file comment);
  // under kAuto, `choices` (optional, shared, outliving the backend) keeps
  // the choices. kInvalidArgument for index < 0 or blas_threads < 0.
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(
      int index, int blas_threads, CpuKernels kernels = CpuKernels::kOpenBlas,
      KernelChoices* choices = nullptr);

  // What kernel-choice keys start with: this CPU's model, the OpenBLAS
  // kernel set and oneDNN's version.
  static std::string MachineKey();

  // OpenBLAS's current process-wide thread count.
  static int BlasThreads();

  // The OpenBLAS kernel set in use ("Haswell", "SkylakeX", ...): chosen when
  // the library loads, from the CPU or the OPENBLAS_CORETYPE variable.
  static std::string BlasCore();

  // Empty when BlasCore() uses the widest vector unit this CPU has; else a
  // one-line warning naming the OPENBLAS_CORETYPE to set before the process
  // starts. OpenBLAS builds misdetect CPUs newer than themselves: 0.3.21 runs
  // its SSE3 "Prescott" kernels on Sapphire Rapids, with 3-4x slower sgemm
  // (docs/BENCHMARKS.md, "Built-in CNN").
  static std::string BlasCoreAdvice();
  // The OPENBLAS_CORETYPE that BlasCoreAdvice names ("SkylakeX", "Haswell"),
  // or "" when the kernels in use fit this CPU.
  static std::string BlasCoreToSet();
  static std::string BlasCoreToSetFor(absl::string_view core, bool cpu_avx2,
                                      bool cpu_avx512);
  // The same for a given kernel set and CPU (for tests).
  static std::string BlasCoreAdviceFor(absl::string_view core, bool cpu_avx2,
                                       bool cpu_avx512);

  const std::string& device() const override { return device_; }
  bool host_memory() const override { return true; }

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
  std::unique_ptr<DirectConv> CreateDirectConv(const DirectConvShape& shape,
                                               std::string* choice) override;
  std::string PrepareGemm(Transpose trans_a, Transpose trans_b, int m, int n,
                          int k) override;
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
  CpuBackend(std::string device, CpuKernels kernels, int threads,
             KernelChoices* choices)
      : device_(std::move(device)),
        kernels_(kernels),
        threads_(threads),
        choices_(choices) {}
  // Keeps the first error for Synchronize().
  void Record(absl::Status status);
  // kAuto: whether oneDNN runs `shape` (a ConvName or gemm name): the choice
  // in choices_, else what time_it says (true: oneDNN is faster; it appends
  // its timings to *note), recorded in choices_. Appends how it was decided
  // to *note.
  bool AutoPicksOneDnn(const std::string& shape,
                       const std::function<bool(std::string*)>& time_it,
                       std::string* note);

  const std::string device_;
  const CpuKernels kernels_;
  const int threads_;             // oneDNN's threads per call
  KernelChoices* const choices_;  // may be null
  absl::Status error_;
  // Gemm shapes that run on oneDNN's sgemm: (trans_a, trans_b, and the two
  // dimensions besides the batch one; see Backend::PrepareGemm).
  using GemmKey = std::tuple<bool, bool, int, int>;
  static GemmKey KeyOf(Transpose trans_a, Transpose trans_b, int m, int n,
                       int k);
  std::set<GemmKey> dnnl_gemms_;
  // EmbeddingBagBackward's per-occurrence gradient sources; kept to avoid a
  // per-batch allocation.
  std::vector<cpu_internal::OccurrenceSource> sources_;
};

}  // namespace ps

#endif  // WORKER_BACKEND_CPU_CPU_BACKEND_H_
