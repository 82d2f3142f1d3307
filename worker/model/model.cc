#include "worker/model/model.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "core/model_spec.h"
#include "worker/model/internal/buffer_alloc.h"

namespace ps {
namespace {

using model_internal::AllocHostInto;
using model_internal::AllocInto;
using model_internal::ConvStack;

// Examples per chunk: max_batch, or fewer for a CNN whose conv buffers would
// pass Model::kMaxConvScratchBytes.
size_t ChunkRows(const std::vector<ConvLayerShape>& convs, size_t max_batch) {
  if (convs.empty()) return max_batch;
  size_t floats = 0;  // per example: patches, activations, pooled + argmax
  for (const ConvLayerShape& s : convs) {
    const size_t pixels = size_t{s.in_h} * s.in_w;
    floats += pixels * s.kernel * s.kernel * s.in_c + 2 * pixels * s.filters +
              2 * size_t{s.out_h} * s.out_w * s.filters;
  }
  const size_t fit = Model::kMaxConvScratchBytes / (floats * sizeof(float));
  return std::max<size_t>(1, std::min(max_batch, fit));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const ModelSpec& spec,
                                                     Backend* backend,
                                                     size_t max_batch,
                                                     size_t tune_batch) {
  PS_RETURN_IF_ERROR(ValidateModelSpec(spec));
  if (spec.has_lab()) {
    return absl::InvalidArgumentError(
        "model.lab: the lab model has no layers to compute (the trainer runs "
        "it without a Model)");
  }
  if (backend == nullptr) {
    return absl::InvalidArgumentError("Model::Create: backend is null");
  }
  if (max_batch < 1 || max_batch > kMaxBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("Model::Create: max_batch must be in [1, ", kMaxBatch,
                     "], got ", max_batch));
  }
  std::vector<uint32_t> widths = ModelLayerWidths(spec);
  size_t input_dim = widths.front();
  std::vector<ConvLayerShape> conv_layers;
  if (spec.has_cnn()) {
    const Cnn& cnn = spec.cnn();
    conv_layers = CnnConvLayers(cnn);
    input_dim = size_t{cnn.height()} * cnn.width() * cnn.channels();
  }
  const size_t chunk = ChunkRows(conv_layers, max_batch);
  const size_t tune =
      tune_batch == 0 ? chunk : std::min<size_t>(tune_batch, chunk);
  std::unique_ptr<ConvStack> convs;
  if (!conv_layers.empty()) {
    convs = std::make_unique<ConvStack>(backend, conv_layers, chunk, tune);
  }
  std::unique_ptr<Model> model(new Model(backend, max_batch, chunk,
                                         std::move(widths), ModelTensors(spec),
                                         std::move(convs), input_dim, tune));
  PS_RETURN_IF_ERROR(model->Allocate());
  return model;
}

Model::Model(Backend* backend, size_t max_batch, size_t chunk,
             std::vector<uint32_t> widths, std::vector<TensorSpec> tensors,
             std::unique_ptr<ConvStack> convs, size_t input_dim,
             size_t tune_rows)
    : backend_(backend),
      max_batch_(max_batch),
      widths_(std::move(widths)),
      tensors_(std::move(tensors)),
      convs_(std::move(convs)),
      input_dim_(input_dim),
      chunk_(chunk),
      tune_rows_(tune_rows) {
  layers_ = model_internal::DenseLayers(widths_, &num_parameters_);
  for (const Layer& layer : layers_) {
    max_width_ = std::max<size_t>(max_width_, layer.out);
  }
  if (convs_ != nullptr) {
    // The dense layers follow the conv layers in the flat layout; backward
    // passes fc0's input gradient and the conv gradients through delta_.
    const size_t shift = convs_->num_parameters();
    for (Layer& layer : layers_) {
      layer.w_offset += shift;
      layer.b_offset += shift;
    }
    num_parameters_ += shift;
    max_width_ = std::max(max_width_, convs_->max_out_size());
  }
}

absl::Status Model::Allocate() {
  absl::Status s;
  AllocInto(backend_, num_parameters_, &grad_, &s);
  if (convs_ != nullptr && s.ok()) {
    s = convs_->Allocate();
    kernel_choices_ = convs_->kernel_choices();
  }
  PrepareDenseGemms();
  acts_.resize(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    AllocInto(backend_, chunk_ * layers_[l].out, &acts_[l], &s);
  }
  AllocInto(backend_, chunk_ * max_width_, &delta_[0], &s);
  AllocInto(backend_, chunk_ * max_width_, &delta_[1], &s);
  AllocInto(backend_, 1, &stats_, &s);
  if (!backend_->host_memory()) {
    AllocInto(backend_, num_parameters_, &call_params_, &s);
    AllocInto(backend_, chunk_ * input_dim(), &x_, &s);
    AllocInto(backend_, chunk_, &labels_, &s);
    AllocHostInto(backend_, num_parameters_, &host_params_, &s);
    AllocHostInto(backend_, chunk_ * input_dim(), &host_x_, &s);
    AllocHostInto(backend_, chunk_, &host_labels_, &s);
    AllocHostInto(backend_, num_parameters_, &host_grad_, &s);
    AllocHostInto(backend_, 1, &host_stats_, &s);
  }
  return s;
}

absl::Status Model::SetParameters(const float* params) {
  if (params == nullptr) {
    return absl::InvalidArgumentError("SetParameters: params is null");
  }
  if (resident_params_.empty()) {
    absl::Status s;
    AllocInto(backend_, num_parameters_, &resident_params_, &s);
    PS_RETURN_IF_ERROR(s);
  }
  if (backend_->host_memory()) {
    std::memcpy(resident_params_.data(), params,
                num_parameters_ * sizeof(float));
  } else if (backend_->IsPinned(params, num_parameters_ * sizeof(float))) {
    backend_->CopyToDevice(params, num_parameters_, resident_params_.data());
  } else {
    std::memcpy(host_params_.data(), params, num_parameters_ * sizeof(float));
    backend_->CopyToDevice(host_params_.data(), num_parameters_,
                           resident_params_.data());
  }
  absl::Status s = backend_->Synchronize();
  has_resident_params_ = s.ok();
  return s;
}

absl::StatusOr<Model::Params> Model::Prepare(const float* params,
                                             const float* x,
                                             const int32_t* labels, size_t n) {
  if (n > 0 && x == nullptr) {
    return absl::InvalidArgumentError("x is null");
  }
  if (n > 0 && labels == nullptr) {
    return absl::InvalidArgumentError("labels is null");
  }
  const int32_t classes = static_cast<int32_t>(num_classes());
  for (size_t i = 0; i < n; ++i) {
    if (labels[i] < 0 || labels[i] >= classes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "labels[", i, "] = ", labels[i], ": must be in [0, ", classes, ")"));
    }
  }
  if (params == nullptr) {
    if (!has_resident_params_) {
      return absl::FailedPreconditionError(
          "params is null and SetParameters was not called");
    }
    return Params{resident_params_.data(), nullptr};
  }
  if (backend_->host_memory()) return Params{params, nullptr};
  return Params{call_params_.data(), params,
                backend_->IsPinned(params, num_parameters_ * sizeof(float))};
}

std::pair<size_t, size_t> Model::LayerRange(size_t layer) const {
  const size_t convs = num_conv_layers();
  if (layer < convs) {
    const model_internal::ConvStage& s = convs_->stage(layer);
    return {s.w_offset, s.b_offset + s.shape.filters - s.w_offset};
  }
  const Layer& l = layers_[layer - convs];
  return {l.w_offset, l.b_offset + l.out - l.w_offset};
}

void Model::PrepareDenseGemms() {
  const int rows = static_cast<int>(tune_rows_);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& layer = layers_[l];
    // Forward, dW, and d(input) unless it is the model's input (Backward).
    for (const std::string& c :
         {backend_->PrepareGemm(Transpose::kNo, Transpose::kNo, rows, layer.out,
                                layer.in),
          backend_->PrepareGemm(Transpose::kYes, Transpose::kNo, layer.in,
                                layer.out, rows),
          l == 0 && convs_ == nullptr
              ? std::string()
              : backend_->PrepareGemm(Transpose::kNo, Transpose::kYes, rows,
                                      layer.in, layer.out)}) {
      if (!c.empty()) kernel_choices_.push_back(c);
    }
  }
}

absl::Status Model::Forward(const float* params, const float* upload,
                            bool upload_pinned, const float* x, int rows,
                            const std::function<absl::Status(size_t)>* before) {
  const float* h = x;
  const size_t convs = num_conv_layers();
  for (size_t l = 0; l < num_layers(); ++l) {
    if (before != nullptr) PS_RETURN_IF_ERROR((*before)(l));
    if (upload != nullptr) {
      // Stage while the device runs layer l - 1; the copy skips the wait for
      // that work (nothing pending touches call_params_: every call ends in
      // Synchronize), and layer l's GEMM waits for it.
      const auto [offset, count] = LayerRange(l);
      const float* from = upload + offset;
      if (!upload_pinned) {
        std::memcpy(host_params_.data() + offset, from, count * sizeof(float));
        from = host_params_.data() + offset;
      }
      backend_->CopyToDeviceEarly(from, count, call_params_.data() + offset);
    }
    if (l < convs) {
      convs_->Forward(l, params, h, rows);
      h = convs_->output(l);
      continue;
    }
    const size_t d = l - convs;
    const Layer& layer = layers_[d];
    float* out = acts_[d].data();
    backend_->Gemm(Transpose::kNo, Transpose::kNo, rows, layer.out, layer.in,
                   1.0f, h, layer.in, params + layer.w_offset, layer.out, 0.0f,
                   out, layer.out);
    if (d + 1 < layers_.size()) {
      backend_->BiasRelu(rows, layer.out, params + layer.b_offset, out);
    } else {
      backend_->BiasAdd(rows, layer.out, params + layer.b_offset, out);
    }
    h = out;
  }
  return absl::OkStatus();
}

void Model::Backward(const float* params, const float* x, int rows, float* grad,
                     bool accumulate, float* download,
                     const std::function<void(size_t)>* after) {
  // delta_[0] holds d(loss)/d(logits) from the softmax cross-entropy.
  int cur = 0;
  const float beta = accumulate ? 1.0f : 0.0f;
  const size_t convs = num_conv_layers();
  const float* dense_in = convs > 0 ? convs_->output(convs - 1) : x;
  for (size_t l = layers_.size(); l-- > 0;) {
    const Layer& layer = layers_[l];
    const float* h = l == 0 ? dense_in : acts_[l - 1].data();
    const float* delta = delta_[cur].data();
    // dW = h^T delta, db = column sums of delta.
    backend_->Gemm(Transpose::kYes, Transpose::kNo, layer.in, layer.out, rows,
                   1.0f, h, layer.in, delta, layer.out, beta,
                   grad + layer.w_offset, layer.out);
    backend_->ColumnSums(rows, layer.out, 1.0f, delta, beta,
                         grad + layer.b_offset);
    if (download != nullptr) {
      // W and b are adjacent in the flat layout: one copy, overlapping the
      // layers still to come.
      backend_->CopyToHost(grad + layer.w_offset,
                           layer.b_offset + layer.out - layer.w_offset,
                           download + layer.w_offset);
    }
    if (l == 0 && convs == 0) {  // no gradient w.r.t. the input
      if (after != nullptr) (*after)(l);
      break;
    }
    // d(h) = delta W^T, then through the ReLU that produced h.
    float* next = delta_[1 - cur].data();
    backend_->Gemm(Transpose::kNo, Transpose::kYes, rows, layer.in, layer.out,
                   1.0f, delta, layer.out, params + layer.w_offset, layer.out,
                   0.0f, next, layer.in);
    // A host backend has written the layer's gradient and read its weights
    // for the last time this step: the hook may push the one and let the
    // next step's values overwrite the other.
    if (after != nullptr) (*after)(convs + l);
    cur = 1 - cur;
    // fc0's input is the last conv layer's pooled output: that layer's
    // backward takes its gradient through the pooling and ReLU.
    if (l > 0) {
      backend_->ReluBackward(static_cast<size_t>(rows) * layer.in, h, next,
                             next);
    }
  }
  for (size_t l = convs; l-- > 0;) {
    const model_internal::ConvStage& stage = convs_->stage(l);
    convs_->Backward(l, params, rows, delta_[cur].data(), grad, beta,
                     l == 0 ? nullptr : delta_[1 - cur].data());
    if (download != nullptr) {
      backend_->CopyToHost(
          grad + stage.w_offset,
          stage.b_offset + stage.shape.filters - stage.w_offset,
          download + stage.w_offset);
    }
    if (after != nullptr) (*after)(l);
    cur = 1 - cur;
  }
}

absl::Status Model::Run(Params params, const float* x, const int32_t* labels,
                        size_t n, float* grad, float* download,
                        float grad_scale, double* loss_sum, size_t* correct,
                        const LayerHooks* hooks) {
  double total_loss = 0.0;
  size_t total_correct = 0;
  const bool host = backend_->host_memory();
  if (n == 0 && grad != nullptr) {
    backend_->Fill(num_parameters_, 0.0f, grad);
    if (download != nullptr) {
      backend_->CopyToHost(static_cast<const float*>(grad), num_parameters_,
                           download);
    }
  }
  const size_t dim = input_dim();
  for (size_t start = 0; start < n; start += chunk_) {
    const size_t rows = std::min(chunk_, n - start);
    const bool last = start + rows == n;
    const float* cx = x + start * dim;
    const int32_t* cl = labels + start;
    if (!host) {
      std::memcpy(host_x_.data(), cx, rows * dim * sizeof(float));
      std::memcpy(host_labels_.data(), cl, rows * sizeof(int32_t));
      // Early copies: each chunk starts with nothing pending (see below).
      backend_->CopyToDeviceEarly(host_x_.data(), rows * dim, x_.data());
      backend_->CopyToDeviceEarly(host_labels_.data(), rows, labels_.data());
      cx = x_.data();
      cl = labels_.data();
    }
    const int r = static_cast<int>(rows);
    // Parameters go up once, during the first chunk's forward pass, which
    // also waits for them (hooks).
    const std::function<absl::Status(size_t)>* before =
        start == 0 && hooks != nullptr && hooks->before_forward
            ? &hooks->before_forward
            : nullptr;
    absl::Status forward =
        Forward(params.device, start == 0 ? params.upload : nullptr,
                params.upload_pinned, cx, r, before);
    if (!forward.ok()) {
      // Nothing may stay pending on the backend after a call.
      backend_->Synchronize().IgnoreError();
      return forward;
    }
    backend_->SoftmaxCrossEntropy(
        r, static_cast<int>(num_classes()), acts_.back().data(), cl, grad_scale,
        grad == nullptr ? nullptr : delta_[0].data(), stats_.data());
    if (hooks != nullptr && hooks->phase_done) hooks->phase_done(true);
    const XentStats* stats = stats_.data();
    if (!host) {
      backend_->CopyToHost(static_cast<const XentStats*>(stats_.data()), 1,
                           host_stats_.data());
      stats = host_stats_.data();
    }
    if (grad != nullptr) {
      // Only a host-memory gradient is final when the backend call returns.
      const std::function<void(size_t)>* after =
          last && host && hooks != nullptr && hooks->after_backward
              ? &hooks->after_backward
              : nullptr;
      Backward(params.device, cx, r, grad, /*accumulate=*/start > 0,
               last ? download : nullptr, after);
      if (hooks != nullptr && hooks->phase_done) hooks->phase_done(false);
    }
    // One wait per chunk: the next chunk reuses the staging buffers, and
    // every chunk (and call) starts with nothing pending on the backend.
    PS_RETURN_IF_ERROR(backend_->Synchronize());
    total_loss += stats->loss_sum;
    total_correct += static_cast<size_t>(stats->correct);
  }
  if (n == 0) PS_RETURN_IF_ERROR(backend_->Synchronize());
  if (loss_sum != nullptr) *loss_sum = total_loss;
  if (correct != nullptr) *correct = total_correct;
  return absl::OkStatus();
}

absl::Status Model::ComputeGradient(const float* params, const float* x,
                                    const int32_t* labels, size_t n,
                                    float* grad, double* loss_sum,
                                    size_t* correct, float grad_scale,
                                    const LayerHooks* hooks) {
  if (grad == nullptr) return absl::InvalidArgumentError("grad is null");
  PS_ASSIGN_OR_RETURN(const Params p, Prepare(params, x, labels, n));
  const bool host = backend_->host_memory();
  if (host) {
    PS_RETURN_IF_ERROR(Run(p, x, labels, n, grad, /*download=*/nullptr,
                           grad_scale, loss_sum, correct, hooks));
  } else {
    // A pinned `grad` (Backend::PinHost) takes the layers' downloads itself.
    const bool pinned =
        backend_->IsPinned(grad, num_parameters_ * sizeof(float));
    PS_RETURN_IF_ERROR(Run(p, x, labels, n, grad_.data(),
                           pinned ? grad : host_grad_.data(), grad_scale,
                           loss_sum, correct, hooks));
    if (!pinned) {
      std::memcpy(grad, host_grad_.data(), num_parameters_ * sizeof(float));
    }
  }
  // Run called after_backward itself only for a host gradient with work.
  if (hooks != nullptr && hooks->after_backward && (!host || n == 0)) {
    for (size_t l = num_layers(); l-- > 0;) hooks->after_backward(l);
  }
  return absl::OkStatus();
}

absl::Status Model::Evaluate(const float* params, const float* x,
                             const int32_t* labels, size_t n, double* loss_sum,
                             size_t* correct) {
  PS_ASSIGN_OR_RETURN(const Params p, Prepare(params, x, labels, n));
  return Run(p, x, labels, n, /*grad=*/nullptr, /*download=*/nullptr,
             /*grad_scale=*/1.0f, loss_sum, correct, /*hooks=*/nullptr);
}

absl::Status Model::ComputeDeviceGradient(const float* params, const float* x,
                                          const int32_t* labels, size_t n,
                                          double* loss_sum, size_t* correct,
                                          float grad_scale,
                                          const LayerHooks* hooks) {
  PS_ASSIGN_OR_RETURN(const Params p, Prepare(params, x, labels, n));
  // The gradient stays on the device: after_backward is the caller's.
  LayerHooks forward_only;
  if (hooks != nullptr) {
    forward_only.before_forward = hooks->before_forward;
    forward_only.phase_done = hooks->phase_done;
  }
  return Run(p, x, labels, n, grad_.data(), /*download=*/nullptr, grad_scale,
             loss_sum, correct, hooks != nullptr ? &forward_only : nullptr);
}

absl::Status Model::CopyGradientToHost(float* grad) {
  if (grad == nullptr) return absl::InvalidArgumentError("grad is null");
  backend_->CopyToHost(static_cast<const float*>(grad_.data()), num_parameters_,
                       grad);
  return backend_->Synchronize();
}

}  // namespace ps
