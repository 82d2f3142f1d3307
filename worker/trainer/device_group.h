// DeviceGroup: one machine's K model replicas ("cpu:0", "cpu:1", "gpu:0"),
// each driven by its own thread, computing one batch's mean gradient
// together. Device 0 is driven by the thread that calls the group (so a
// single device costs no thread hand-off); devices 1..K-1 by their own.
//
//   DeviceGroup::Options options;
//   options.devices = {"cpu:0", "cpu:1"};
//   options.max_batch = 64;
//   absl::StatusOr<std::unique_ptr<DeviceGroup>> group =
//       DeviceGroup::Create(spec.model(), options);
//   double loss_sum; size_t correct;
//   absl::Status s = (*group)->ComputeGradient(params.data(), x, labels, 64,
//                                              grad.data(), &loss_sum,
//                                              &correct);
//
// A batch of n examples is cut into K contiguous slices, slice k holding
// n * w_k / sum(w) examples rounded by the largest-remainder method (ties to
// the lower device index): deterministic, every example in exactly one slice.
// Each device computes 1 / n times the SUM of its slice's per-example
// gradients in parallel (the scale rides on d(loss)/d(logits), see
// Model::ComputeGradient), device 0 straight into the caller's output
// buffer; the caller's thread then adds the other K - 1 in device order, in
// one in-place pass (none with one device). The result does not depend on
// thread timing and matches a single device to float rounding.
//
// The reduce: with 2+ devices that are all GPUs and NCCL in the build, each
// replica keeps its gradient on its GPU (Model::ComputeDeviceGradient), the
// GPUs sum them with an NCCL all-reduce (GpuReducer), and device 0 copies the
// one sum down: one download instead of K, no host pass. The all-reduce waits
// with a deadline (Options::reduce_timeout) and watches NCCL's asynchronous
// errors, so a failed GPU fails the step instead of hanging it. Otherwise
// (CPU replicas, a CPU/GPU mix, one device, no NCCL) the reduce runs on the
// host as above. The two agree to float rounding (NCCL's summation order is
// its own).
//
// Per-layer pipeline (GradientHooks, for a step that overlaps communication
// with compute): every device asks before_forward(l) before its forward pass
// reads layer l's parameters, and the host reduce runs per layer: the device
// that finishes layer l's backward last (a per-layer barrier that never
// blocks) adds that layer's slice of every replica's gradient into `grad`,
// in device order as above (the same sums, bit for bit), and calls
// layer_ready(l), while the other layers are still being computed. The NCCL
// reduce stays whole-model: there layer_ready runs for every layer once it
// is done.
#ifndef WORKER_TRAINER_DEVICE_GROUP_H_
#define WORKER_TRAINER_DEVICE_GROUP_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/defaults.h"
#include "common/trace_recorder.h"
#include "proto/job.pb.h"
#include "worker/backend/backend.h"
#include "worker/backend/backend_factory.h"
#include "worker/model/model.h"

namespace ps {

// Cuts n examples into weights.size() contiguous slice sizes proportional to
// `weights` (largest remainder, ties to the lower index). Writes the sizes to
// `counts` (weights.size() elements, summing to n). Every weight must be > 0.
void SplitBatch(size_t n, absl::Span<const double> weights,
                absl::Span<size_t> counts);

// Per-layer callbacks of DeviceGroup::ComputeGradient (see the file
// comment). Layer l owns the flat range LayerRange(l) (fc<l>/w, fc<l>/b).
struct GradientHooks {
  // Called on each device's thread before it reads layer l's parameters,
  // layers in order; must be thread-safe; may block until they arrive. An
  // error fails the computation.
  std::function<absl::Status(size_t layer)> before_forward;
  // Called once layer l's reduced gradient is final in `grad` and no device
  // reads layer l's parameters any more in this call (they may be
  // overwritten from then on), layers
  // L-1, ..., 0, one call at a time, each before the next begins, from the
  // caller's thread or a device's. Must not block for long: the devices
  // wait behind it.
  std::function<void(size_t layer)> layer_ready;
};

// Step timelines: where ComputeGradient records its spans (TRACE_FORWARD and
// TRACE_BACKWARD per device and chunk of examples, TRACE_LOCAL_REDUCE).
struct StepTrace {
  TraceRecorder* recorder = nullptr;  // borrowed for the call; null: none
  uint64_t step = 0;
};

// Thread-compatible: one thread calls ComputeGradient / Evaluate at a time
// (device 0 runs on it); each call blocks until every device involved has
// finished.
class DeviceGroup {
 public:
  struct Options {
    std::vector<std::string> devices = {"cpu:0"};
    // Relative share of each batch per device (> 0 each); empty = equal.
    std::vector<double> weights;
    // BLAS threads of each "cpu:*" replica, passed to CreateBackend. OpenBLAS
    // has one process-wide count, so K CPU replicas on C cores want
    // max(1, C / K); 0 leaves OpenBLAS's own setting.
    int threads_per_device = 1;
    // Kernels of the "cpu:*" replicas (CpuKernels in
    // worker/backend/cpu/cpu_backend.h); kAuto times them at tune_batch,
    // or follows cpu_kernel_choices (optional; outlives the group), where
    // its timed choices are also recorded for every replica and later run.
    CpuKernels cpu_kernels = CpuKernels::kOpenBlas;
    KernelChoices* cpu_kernel_choices = nullptr;
    // The examples of one training step across all devices: each times its
    // kernel choices at its share of it (Model::Create); 0: at max_batch.
    size_t tune_batch = 0;
    // Examples a replica processes at once (its buffers are sized for it);
    // larger calls run in chunks of max_batch.
    size_t max_batch = 0;
    // How long the GPUs' all-reduce may take before the step fails.
    absl::Duration reduce_timeout =
        absl::Milliseconds(kDefaultLocalReduceTimeoutMs);
  };

  // Creates the backends and models on the caller's thread (OpenBLAS's
  // thread count is set before any replica runs), then starts a thread for
  // each device but the first. kInvalidArgument naming the field for no
  // devices, a repeated device, weights of the wrong count or <= 0, or
  // max_batch 0; backend and model errors prefixed with the device; errors
  // setting up NCCL for 2+ GPUs (but a build without NCCL reduces on the
  // host).
  static absl::StatusOr<std::unique_ptr<DeviceGroup>> Create(
      const ModelSpec& spec, const Options& options);

  // Stops and joins the device threads.
  ~DeviceGroup();

  DeviceGroup(const DeviceGroup&) = delete;
  DeviceGroup& operator=(const DeviceGroup&) = delete;

  size_t num_devices() const { return devices_.size(); }
  const std::vector<std::string>& device_names() const { return names_; }
  // Every device's Model::kernel_choices(), device by device.
  std::vector<std::string> kernel_choices() const;
  size_t num_parameters() const;
  size_t input_dim() const;
  size_t num_classes() const;
  size_t max_batch() const { return max_batch_; }
  // Pins caller host memory on every device backend (Backend::PinHost), so
  // the models copy parameters and gradients straight from and into it (no
  // staging copy; nothing to do for "cpu:*" devices). An error unpins what
  // this call pinned and is returned: the group then works unpinned, slower.
  // The memory must stay alive until UnpinHost.
  absl::Status PinHost(void* host, size_t bytes);
  void UnpinHost(void* host);
  // True when gradients are summed on the GPUs (NCCL), see the file comment.
  bool reduces_on_devices() const { return reducer_ != nullptr; }
  const std::vector<TensorSpec>& tensors() const;
  size_t num_layers() const;
  // [offset, offset + length) of layer l's parameters in the flat layout.
  std::pair<size_t, size_t> LayerRange(size_t layer) const;

  // grad (num_parameters floats) = the MEAN over the n examples of the
  // loss gradient at params; *loss_sum and *correct get the batch's summed
  // loss and correct predictions. x holds n * input_dim features, labels n
  // labels; n > 0. Errors name the device that failed. `hooks` (nullable,
  // borrowed for the call): see GradientHooks; after an error some layers
  // may have had no layer_ready. `trace`: see StepTrace.
  absl::Status ComputeGradient(const float* params, const float* x,
                               const int32_t* labels, size_t n, float* grad,
                               double* loss_sum, size_t* correct,
                               const GradientHooks* hooks = nullptr,
                               StepTrace trace = {});

  // Summed loss and correct predictions over n examples (any n), on device
  // 0 alone.
  absl::Status Evaluate(const float* params, const float* x,
                        const int32_t* labels, size_t n, double* loss_sum,
                        size_t* correct);

 private:
  enum class TaskKind { kGradient, kEvaluate };

  struct Device {
    std::string name;
    std::unique_ptr<Backend> backend;
    std::unique_ptr<Model> model;  // uses backend; destroyed first
    std::vector<float> grad;       // this replica's SUM gradient (not device 0)
    std::thread thread;            // none for device 0
    // Written by the device thread, read by the caller after the task.
    absl::Status status;
    double loss_sum = 0.0;
    size_t correct = 0;
  };

  // One task for the devices, published under mu_ with generation_.
  struct Task {
    TaskKind kind = TaskKind::kGradient;
    const float* params = nullptr;
    const float* x = nullptr;
    const int32_t* labels = nullptr;
    size_t n = 0;
    float* grad0 = nullptr;   // device 0's gradient: the caller's output
    float grad_scale = 1.0f;  // 1 / n: every replica's sum is scaled by it
    // Every device runs, even with an empty slice (a zero gradient): the
    // NCCL all-reduce needs every rank.
    bool all_devices = false;
    const GradientHooks* hooks = nullptr;  // kGradient only; nullable
    StepTrace trace;                       // kGradient only
  };

  DeviceGroup() = default;
  void DeviceMain(size_t index);
  // Splits the task across the devices (task.n examples: by weight for a
  // gradient, all on device 0 for an evaluation), runs it on every device
  // with a non-empty slice and waits for them.
  void RunTask(const Task& task);
  void RunOnDevice(size_t index, const Task& task, size_t begin, size_t n);
  // The device-side gradient: compute, all-reduce, device 0 copies it down.
  absl::Status DeviceGradient(size_t index, const Task& task, size_t begin,
                              size_t n);
  // A device finished layer l's backward (host reduce with hooks): the last
  // one reduces the layer and calls layer_ready.
  void LayerDone(const Task& task, size_t layer);
  // Adds the other devices' slices of [begin, end) into grad, in device
  // order (zeroing it first when device 0 had no examples).
  void ReduceRange(float* grad, size_t begin, size_t end) const;
  // A traced local reduce of `layer` (-1: all) from start_ns to now, when
  // there is more than one device to reduce.
  void TraceReduce(const StepTrace& trace, int32_t layer,
                   int64_t start_ns) const;
  // Sums the devices' loss and correct counts (those that ran when `all` is
  // false) into the outputs; the first device error, prefixed with its name
  // (one that is not a deadline first: a peer's timeout follows the cause).
  absl::Status Collect(bool all, double* loss_sum, size_t* correct) const;
  // Creates the NCCL reducer when every device is a GPU and there are 2+.
  absl::Status MaybeReduceOnDevices();

  std::vector<std::unique_ptr<Device>> devices_;
  // The GPUs' all-reduce, or null for the host reduce. Declared after
  // devices_: destroyed before the backends it uses.
  std::unique_ptr<LocalReducer> reducer_;
  absl::Duration reduce_timeout_;
  std::vector<std::string> names_;
  std::vector<double> weights_;
  size_t max_batch_ = 0;
  absl::Mutex mu_;
  // Slice sizes and offsets of the current task, per device; sized once.
  // Written by the calling thread under mu_ and read by device threads under
  // mu_; the calling thread (their only writer) also reads them unlocked.
  std::vector<size_t> counts_;
  std::vector<size_t> offsets_;
  Task task_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  size_t pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Per-layer barrier of the current task (hooks, host reduce): devices
  // with examples, and how many have finished each layer's backward.
  absl::Mutex layer_mu_;
  size_t layer_devices_ ABSL_GUARDED_BY(layer_mu_) = 0;
  std::vector<size_t> layer_arrivals_ ABSL_GUARDED_BY(layer_mu_);
};

}  // namespace ps

#endif  // WORKER_TRAINER_DEVICE_GROUP_H_
