// One model replica on one device: forward, backward and evaluation of
// softmax regression, an MLP or a CNN (see model_spec.h for the layers and the
// flat parameter layout), written once against ps::Backend. A CNN's conv
// layers (internal/conv_stack.h: im2col + Gemm, bias + ReLU, max pooling) come
// before its dense layers; everything below applies to both kinds of layer.
//
//   absl::StatusOr<std::unique_ptr<Model>> m =
//       Model::Create(job.model(), backend.get(), /*max_batch=*/256);
//   std::vector<float> grad((*m)->num_parameters());
//   double loss_sum; size_t correct;
//   absl::Status s = (*m)->ComputeGradient(params.data(), x, labels, n,
//                                          grad.data(), &loss_sum, &correct);
//   // grad is d(sum of the n losses)/d(params): divide by the global batch.
//
// Costs. Buffers for max_batch examples are allocated once in Create (the
// SetParameters buffer on its first call); a call allocates nothing. On a
// host-memory backend (CPU) params, x, labels and grad are used in place, with
// no copies. On a GPU params/x/labels go up through page-locked staging, layer
// by layer so that layer 0 computes while later layers upload, and each layer's
// gradient goes down as soon as it is ready, overlapping the rest of the
// backward pass. SetParameters() uploads parameters once for several calls
// (pass params == nullptr to use them).
//
// Larger batches than max_batch are fine: they run in chunks of max_batch and
// the results (gradient, loss, correct) are the sums over all chunks. A CNN's
// chunks are smaller where its conv buffers for max_batch examples would pass
// kMaxConvScratchBytes (the im2col patches take k * k floats per input
// float).
//
// Thread-safety: not thread-safe; one thread drives a Model (and its
// Backend). Models on distinct backends may run concurrently.

#ifndef WORKER_MODEL_MODEL_H_
#define WORKER_MODEL_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "worker/backend/backend.h"
#include "worker/model/internal/conv_stack.h"
#include "worker/model/internal/dense_layers.h"

namespace ps {

// Per-layer callbacks of a gradient computation, for a step pipeline that
// overlaps communication with compute (worker/trainer/trainer.h). Layer l
// owns the flat range of the l-th (W, b) pair of tensors: fc<l>/w and
// fc<l>/b, or for a CNN with C conv layers conv<l>/w and conv<l>/b for l < C,
// then fc<l - C>/w and fc<l - C>/b.
struct LayerHooks {
  // Called before the forward pass reads layer l's parameters (first chunk
  // only), layers in order 0, 1, ...; may block (until the parameters
  // arrive). An error ends the computation with it.
  std::function<absl::Status(size_t layer)> before_forward;
  // Called once layer l's gradient (W and b) is final in the caller's grad
  // buffer and backward has read layer l's parameters for the last time
  // (so they may be overwritten from then on), layers in order L-1, ..., 0. On
  // a host-memory backend that is while backward goes on with the layers below;
  // on a GPU (whose gradient comes down at the end) all of them after the last
  // layer.
  std::function<void(size_t layer)> after_backward;
  // Step timelines: called after each chunk of examples' forward pass and
  // loss (true) and after its backward pass (false). On a GPU the calls
  // mark when the work was queued, not when it ran.
  std::function<void(bool forward)> phase_done;
};

class Model {
 public:
  // Largest accepted max_batch (keeps row counts within int for BLAS).
  static constexpr size_t kMaxBatch = size_t{1} << 20;
  // A CNN's conv buffers (patches, activations) stay within this many bytes
  // per chunk of examples (at least one example per chunk): a memory bound,
  // not a tuning knob.
  static constexpr size_t kMaxConvScratchBytes = size_t{256} << 20;

  // A replica of `spec` on `backend` (borrowed; must outlive the Model).
  // Where the backend has a choice of kernels it times them at tune_batch
  // examples per call (the training share; 0 or more than a chunk: a
  // chunk), see kernel_choices(). kInvalidArgument for an invalid spec
  // (field named), a lab model, a null backend or max_batch outside [1,
  // kMaxBatch]; kResourceExhausted when the buffers do not fit the device.
  static absl::StatusOr<std::unique_ptr<Model>> Create(const ModelSpec& spec,
                                                       Backend* backend,
                                                       size_t max_batch,
                                                       size_t tune_batch = 0);

  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  size_t num_parameters() const { return num_parameters_; }
  // Floats per example: input_dim, or height * width * channels (NHWC).
  size_t input_dim() const { return input_dim_; }
  size_t num_classes() const { return widths_.back(); }
  size_t max_batch() const { return max_batch_; }
  Backend* backend() const { return backend_; }
  // What Create picked per layer where the backend has a choice of kernels
  // (Backend::CreateDirectConv, Backend::PrepareGemm), one line each, for
  // the start log; empty when it had none.
  const std::vector<std::string>& kernel_choices() const {
    return kernel_choices_;
  }

  // grad_scale times the gradient of the SUM of per-example cross-entropy
  // losses over the n examples. A caller that wants the mean over a global
  // batch of N passes 1 / N: the scale is applied once, to d(loss)/d(logits),
  // so no extra pass over the gradient is needed, and K devices' scaled sums
  // add up to the single-device mean (exactly so when N is a power of two).
  // params/grad: host flat buffers of
  // num_parameters() floats (params == nullptr: those of SetParameters);
  // on a device backend, pinned ones (Backend::PinHost) are copied from and
  // into directly, others through the model's pinned staging buffers; x:
  // n * input_dim() row-major host floats; labels: n ints in
  // [0, num_classes()). loss_sum/correct receive the summed loss and the
  // count of examples whose arg-max logit is the label (either may be
  // null). n == 0 gives a zero gradient. Blocks until done. kInvalidArgument
  // for a null buffer or a label out of range (index named);
  // kFailedPrecondition for params == nullptr before SetParameters. `hooks`
  // (nullable, borrowed for the call) see LayerHooks; with n == 0 only
  // after_backward runs, for every layer.
  absl::Status ComputeGradient(const float* params, const float* x,
                               const int32_t* labels, size_t n, float* grad,
                               double* loss_sum, size_t* correct,
                               float grad_scale = 1.0f,
                               const LayerHooks* hooks = nullptr);

  size_t num_layers() const { return num_conv_layers() + layers_.size(); }
  // [offset, offset + length) of layer l's parameters (W then b) in the
  // flat layout.
  std::pair<size_t, size_t> LayerRange(size_t layer) const;

  // Forward pass only: the summed loss and the correct count, as above.
  absl::Status Evaluate(const float* params, const float* x,
                        const int32_t* labels, size_t n, double* loss_sum,
                        size_t* correct);

  // Copies num_parameters() host floats into backend memory, to be used by
  // calls that pass params == nullptr (one upload per step, however many
  // calls). Calls that pass non-null params use those and leave these alone.
  absl::Status SetParameters(const float* params);

  // As ComputeGradient, but the gradient stays in backend memory at
  // device_gradient() (for a LocalReducer all-reduce across devices);
  // CopyGradientToHost fetches it. Blocks until done.
  absl::Status ComputeDeviceGradient(const float* params, const float* x,
                                     const int32_t* labels, size_t n,
                                     double* loss_sum, size_t* correct,
                                     float grad_scale = 1.0f,
                                     const LayerHooks* hooks = nullptr);
  // num_parameters() floats of backend memory, in flat layout order.
  float* device_gradient() const { return grad_.data(); }
  // Copies device_gradient() (after any work enqueued on it, e.g. an
  // all-reduce) to `grad` (num_parameters() host floats). Blocks.
  absl::Status CopyGradientToHost(float* grad);

 private:
  using Layer = model_internal::DenseLayer;

  // `convs` (null unless a CNN) holds buffers for `chunk` examples.
  Model(Backend* backend, size_t max_batch, size_t chunk,
        std::vector<uint32_t> widths, std::vector<TensorSpec> tensors,
        std::unique_ptr<model_internal::ConvStack> convs, size_t input_dim,
        size_t tune_rows);
  size_t num_conv_layers() const {
    return convs_ == nullptr ? 0 : convs_->num_layers();
  }
  absl::Status Allocate();
  // Lets the backend pick the dense layers' GEMM kernels (PrepareGemm).
  void PrepareDenseGemms();
  // Where a call's parameters come from.
  struct Params {
    const float* device;  // backend memory the layers read
    const float* upload;  // host params to upload into `device` first, or null
    // `upload` is pinned (Backend::PinHost): copied from directly, without
    // the staging copy into host_params_.
    bool upload_pinned = false;
  };
  // Checks pointers and labels and resolves `params` (nullable) for Run.
  absl::StatusOr<Params> Prepare(const float* params, const float* x,
                                 const int32_t* labels, size_t n);
  // Forward (and, when grad is not null, backward into grad: backend memory,
  // scaled by grad_scale) over n examples in chunks of max_batch. When download
  // is not null each layer's gradient is copied there (host) as soon as the
  // last chunk has produced it. Blocks until done.
  // `hooks` (nullable) as ComputeGradient's; after_backward is called only
  // when grad is host memory (else the caller calls it).
  absl::Status Run(Params params, const float* x, const int32_t* labels,
                   size_t n, float* grad, float* download, float grad_scale,
                   double* loss_sum, size_t* correct, const LayerHooks* hooks);
  // Enqueues the forward pass; when `upload` is not null each layer's
  // parameters are uploaded right before that layer, overlapping the
  // previous layer's compute. `before` (nullable) runs before each layer.
  absl::Status Forward(const float* params, const float* upload,
                       bool upload_pinned, const float* x, int rows,
                       const std::function<absl::Status(size_t)>* before);
  // `after` (nullable) runs as each layer's gradient is final.
  void Backward(const float* params, const float* x, int rows, float* grad,
                bool accumulate, float* download,
                const std::function<void(size_t)>* after);

  Backend* const backend_;  // borrowed
  const size_t max_batch_;
  const std::vector<uint32_t> widths_;  // dense: input, hidden..., classes
  const std::vector<TensorSpec> tensors_;
  const std::unique_ptr<model_internal::ConvStack> convs_;  // CNN, else null
  const size_t input_dim_;
  const size_t chunk_;         // examples per chunk, <= max_batch_
  const size_t tune_rows_;     // in [1, chunk_]
  std::vector<Layer> layers_;  // dense, offsets after the conv layers'
  size_t num_parameters_ = 0;
  size_t max_width_ = 0;  // widest dense layer output or conv gradient
  std::vector<std::string> kernel_choices_;

  // Backend memory.
  DeviceBuffer<float> grad_;             // device_gradient()
  DeviceBuffer<float> resident_params_;  // SetParameters
  bool has_resident_params_ = false;
  std::vector<DeviceBuffer<float>> acts_;  // per dense layer, chunk_ x out
  DeviceBuffer<float> delta_[2];           // backward ping-pong
  DeviceBuffer<XentStats> stats_;
  // Only on backends without host memory: uploads and their staging.
  DeviceBuffer<float> call_params_;
  DeviceBuffer<float> x_;
  DeviceBuffer<int32_t> labels_;
  HostBuffer<float> host_params_;
  HostBuffer<float> host_x_;
  HostBuffer<int32_t> host_labels_;
  HostBuffer<float> host_grad_;
  HostBuffer<XentStats> host_stats_;
};

}  // namespace ps

#endif  // WORKER_MODEL_MODEL_H_
