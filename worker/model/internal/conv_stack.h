// The conv layers of a CNN (core/model_spec.h, ModelSpec.cnn) on one backend:
// per layer the backend's direct convolution where it offers a faster one
// (Backend::CreateDirectConv: oneDNN on the CPU), else im2col + Gemm and
// bias + ReLU; max pooling; and the backward pass (dW, db and the input
// gradient, through Gemm and Col2Im on the im2col path). Model drives it
// layer by layer, so that its hooks and parameter uploads run between the
// layers.
//
//   ConvStack convs(backend, CnnConvLayers(spec.cnn()), /*rows=*/chunk);
//   PS_RETURN_IF_ERROR(convs.Allocate());   // also picks the kernels
//   for (l ...) convs.Forward(l, params, in, n);  in = convs.output(l)
//   for (l ...) convs.Backward(l, params, n, d_out, grad, beta, d_in);
//
// All pointers are backend memory. Thread-compatible, like its Backend.

#ifndef WORKER_MODEL_INTERNAL_CONV_STACK_H_
#define WORKER_MODEL_INTERNAL_CONV_STACK_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/model_spec.h"
#include "worker/backend/backend.h"

namespace ps {
namespace model_internal {

// One conv layer; offsets index the flat parameter layout (conv layers
// first, from 0).
struct ConvStage {
  ConvLayerShape shape;
  size_t w_offset;  // k * k * in_c * filters floats, then the bias
  size_t b_offset;  // filters floats

  int row_len() const { return shape.kernel * shape.kernel * shape.in_c; }
  // Floats per example of the input, of the conv + ReLU output, and of the
  // pooled output.
  size_t in_size() const {
    return size_t{shape.in_h} * shape.in_w * shape.in_c;
  }
  size_t act_size() const {
    return size_t{shape.in_h} * shape.in_w * shape.filters;
  }
  size_t out_size() const {
    return size_t{shape.out_h} * shape.out_w * shape.filters;
  }
};

class ConvStack {
 public:
  // `layers` from CnnConvLayers of a valid spec; up to max_rows examples
  // per call, mostly tune_rows (where kernels are timed; 0: max_rows).
  // `backend` is borrowed and must outlive this.
  ConvStack(Backend* backend, const std::vector<ConvLayerShape>& layers,
            size_t max_rows, size_t tune_rows = 0);

  // Picks each layer's kernels (the backend may time them) and allocates the
  // buffers for max_rows examples; kResourceExhausted when they do not fit.
  absl::Status Allocate();
  // One line per layer (and per Gemm shape the backend chose a kernel for):
  // what Allocate picked, for the start log.
  const std::vector<std::string>& kernel_choices() const { return choices_; }

  size_t num_layers() const { return stages_.size(); }
  const ConvStage& stage(size_t l) const { return stages_[l]; }
  // Floats the conv layers' tensors hold together.
  size_t num_parameters() const { return num_parameters_; }
  // Floats per example of the last layer's output (fc0's input).
  size_t output_size() const { return stages_.back().out_size(); }
  // The largest out_size() of any layer (for a caller's gradient buffer).
  size_t max_out_size() const { return max_out_; }

  // Enqueues layer l on `in` (rows x in_size(), NHWC): output(l) then holds
  // rows x out_size() floats. `in` must stay valid and unchanged until the
  // layer's Backward.
  void Forward(size_t l, const float* params, const float* in, int rows);
  const float* output(size_t l) const;

  // Enqueues layer l's backward pass for the rows of its last Forward (whose
  // `in` it reads again, or whose patches of it it still holds).
  // d_out: d(loss)/d(output(l)), rows x out_size() (overwritten). Writes
  // dW and db into grad (beta 0: overwrite, 1: accumulate), then, when d_in
  // is not null, d(loss)/d(in) (rows x in_size(); not after ReLU: the
  // caller's layer below applies its own) into d_in. Reads params for the
  // last time before returning.
  void Backward(size_t l, const float* params, int rows, float* d_out,
                float* grad, float beta, float* d_in);

 private:
  // Fills direct_ and choices_ (and prepares the im2col layers' GEMMs).
  void PickKernels();

  Backend* const backend_;  // borrowed
  const size_t max_rows_;
  const size_t tune_rows_;  // in [1, max_rows_]
  std::vector<ConvStage> stages_;
  size_t num_parameters_ = 0;
  size_t max_act_ = 0;
  size_t max_out_ = 0;
  // Per layer: the backend's direct convolution, or null for im2col + Gemm.
  std::vector<std::unique_ptr<DirectConv>> direct_;
  std::vector<const float*> inputs_;  // per layer, of the last Forward
  std::vector<std::string> choices_;
  std::vector<DeviceBuffer<float>> cols_;    // im2col layers; dcols too
  std::vector<DeviceBuffer<float>> act_;     // per layer, conv + ReLU
  std::vector<DeviceBuffer<float>> pooled_;  // per layer with pool > 1
  std::vector<DeviceBuffer<int32_t>> arg_;   // per layer with pool > 1
  DeviceBuffer<float> d_act_;                // max_rows x max act_size()
};

}  // namespace model_internal
}  // namespace ps

#endif  // WORKER_MODEL_INTERNAL_CONV_STACK_H_
