#include "worker/model/ctr_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/defaults.h"
#include "common/status_macros.h"
#include "core/model_spec.h"
#include "worker/model/internal/buffer_alloc.h"

namespace ps {
namespace {

using model_internal::AllocHostInto;
using model_internal::AllocInto;

// sigmoid(z) without overflow for either sign.
double Sigmoid(double z) {
  if (z >= 0) return 1.0 / (1.0 + std::exp(-z));
  const double e = std::exp(z);
  return e / (1.0 + e);
}

// log1p(exp(-|z|)) + max(z, 0) - z * y: the logistic loss, stable for any z.
double LogisticLoss(double z, double y) {
  return std::log1p(std::exp(-std::fabs(z))) + std::max(z, 0.0) - z * y;
}

// Sums the n examples' losses (in example order, in double) and writes
// grad_scale * (sigmoid(z) - y) to delta. 1 - sigmoid(z) is sigmoid(-z),
// which keeps a positive example's small gradient exact.
double LogisticLossAndGrad(size_t n, const float* logits, const float* labels,
                           float grad_scale, float* delta) {
  double loss = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double z = logits[i];
    const double g = labels[i] == 1.0f ? -Sigmoid(-z) : Sigmoid(z);
    delta[i] = static_cast<float>(g * grad_scale);
    loss += LogisticLoss(z, labels[i]);
  }
  return loss;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CtrReplica>> CtrReplica::Create(
    const ModelSpec& spec, Backend* backend, size_t max_batch) {
  PS_RETURN_IF_ERROR(ValidateModelSpec(spec));
  if (!spec.has_ctr()) {
    return absl::InvalidArgumentError(
        "model.ctr: CtrReplica computes the ctr model only (use Model for "
        "softmax and mlp)");
  }
  if (backend == nullptr) {
    return absl::InvalidArgumentError("CtrReplica::Create: backend is null");
  }
  if (max_batch < 1 || max_batch > kMaxBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("CtrReplica::Create: max_batch must be in [1, ", kMaxBatch,
                     "], got ", max_batch));
  }
  const CtrModel& m = spec.ctr();
  const uint32_t fields = m.has_fields() ? m.fields() : kDefaultCtrFields;
  const uint32_t dense =
      m.has_dense_features() ? m.dense_features() : kDefaultCtrDenseFeatures;
  std::unique_ptr<CtrReplica> model(new CtrReplica(
      backend, max_batch, static_cast<int>(fields),
      static_cast<int>(m.embedding_dim()), static_cast<int>(dense),
      ModelLayerWidths(spec), ModelTensors(spec)));
  PS_RETURN_IF_ERROR(model->Allocate());
  return model;
}

CtrReplica::CtrReplica(Backend* backend, size_t max_batch, int fields, int dim,
                       int dense_features, std::vector<uint32_t> widths,
                       std::vector<TensorSpec> tensors)
    : backend_(backend),
      max_batch_(max_batch),
      fields_(fields),
      dim_(dim),
      dense_features_(dense_features),
      widths_(std::move(widths)),
      tensors_(std::move(tensors)) {
  layers_ = model_internal::DenseLayers(widths_, &num_parameters_);
  max_width_ = widths_.front();
  for (const Layer& layer : layers_) {
    max_width_ = std::max<size_t>(max_width_, layer.out);
  }
  max_rows_ = max_batch_ * static_cast<size_t>(fields_);
}

absl::Status CtrReplica::Allocate() {
  absl::Status s;
  AllocInto(backend_, max_batch_ * input_dim(), &x_, &s);
  acts_.resize(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    AllocInto(backend_, max_batch_ * layers_[l].out, &acts_[l], &s);
  }
  AllocInto(backend_, max_batch_ * max_width_, &delta_[0], &s);
  AllocInto(backend_, max_batch_ * max_width_, &delta_[1], &s);
  if (backend_->host_memory()) return s;

  const size_t row_floats = max_rows_ * dim_;
  AllocInto(backend_, num_parameters_, &params_, &s);
  AllocInto(backend_, num_parameters_, &grad_, &s);
  AllocInto(backend_, row_floats, &rows_, &s);
  AllocInto(backend_, row_floats, &row_grads_, &s);
  AllocInto(backend_, max_rows_ + 1, &offsets_, &s);
  AllocInto(backend_, max_rows_, &indices_, &s);
  AllocInto(backend_, max_rows_ + 1, &row_offsets_, &s);
  AllocInto(backend_, max_rows_, &row_occurrences_, &s);
  AllocHostInto(backend_, max_batch_ * input_dim(), &host_x_, &s);
  AllocHostInto(backend_, num_parameters_, &host_params_, &s);
  AllocHostInto(backend_, num_parameters_, &host_grad_, &s);
  AllocHostInto(backend_, row_floats, &host_rows_, &s);
  AllocHostInto(backend_, row_floats, &host_row_grads_, &s);
  AllocHostInto(backend_, max_batch_, &host_logits_, &s);
  AllocHostInto(backend_, max_batch_, &host_delta_, &s);
  AllocHostInto(backend_, 3 * max_rows_ + 1, &host_index_, &s);
  PS_RETURN_IF_ERROR(s);
  // The embedding columns of host_x_ are overwritten on the device; zero
  // them so no uninitialised bytes are ever copied.
  std::fill(host_x_.data(), host_x_.data() + host_x_.size(), 0.0f);
  // One id per bag: bag i is occurrence i, for every batch.
  std::iota(host_index_.data(), host_index_.data() + max_rows_ + 1, 0);
  backend_->CopyToDevice(static_cast<const int32_t*>(host_index_.data()),
                         max_rows_ + 1, offsets_.data());
  return backend_->Synchronize();
}

absl::Status CtrReplica::Prepare(const CtrBatch& batch) {
  const size_t n = batch.size;
  const size_t dense = static_cast<size_t>(dense_features_);
  if (n > max_batch_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch.size: ", n, " examples exceed max_batch ", max_batch_));
  }
  if (batch.labels.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch.labels: ", batch.labels.size(), " elements for ", n,
                     " examples"));
  }
  if (batch.dense.size() != n * dense) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch.dense: ", batch.dense.size(), " elements, want ", n,
                     " x ", dense, " (dense_features)"));
  }
  if (batch.ids.size() != n * fields_) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch.ids: ", batch.ids.size(), " elements, want ", n,
                     " x ", fields_, " (fields)"));
  }
  for (size_t i = 0; i < n; ++i) {
    if (batch.labels[i] != 0.0f && batch.labels[i] != 1.0f) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch.labels[", i, "] = ", batch.labels[i], ": must be 0 or 1"));
    }
  }
  for (size_t i = 0; i < batch.dense.size(); ++i) {
    if (!std::isfinite(batch.dense[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch.dense[", i, "] (example ", i / dense, ", feature ", i % dense,
          ") = ", batch.dense[i], ": must be finite"));
    }
  }
  // n * fields <= kMaxBatch * kMaxCtrFields < 2^31: DedupSingle accepts it.
  PS_RETURN_IF_ERROR(dedup_.DedupSingle(batch.ids));
  labels_.assign(batch.labels.begin(), batch.labels.end());
  batch_size_ = n;
  prepared_ = true;

  const bool host = backend_->host_memory();
  const size_t in = input_dim();
  const size_t dense_column = static_cast<size_t>(fields_) * dim_;
  float* x = host ? x_.data() : host_x_.data();
  for (size_t b = 0; b < n; ++b) {
    std::memcpy(x + b * in + dense_column, batch.dense.data() + b * dense,
                dense * sizeof(float));
  }
  if (host || n == 0) return absl::OkStatus();

  // The device gets the whole input (its embedding columns are overwritten
  // by the lookup) and the index arrays (the offsets are there already).
  backend_->CopyToDevice(static_cast<const float*>(host_x_.data()), n * in,
                         x_.data());
  int32_t* staged = host_index_.data();
  const auto stage = [&](absl::Span<const int32_t> from, int32_t* to) {
    std::memcpy(staged, from.data(), from.size() * sizeof(int32_t));
    backend_->CopyToDevice(static_cast<const int32_t*>(staged), from.size(),
                           to);
    staged += from.size();
  };
  stage(dedup_.indices(), indices_.data());
  stage(dedup_.row_offsets(), row_offsets_.data());
  stage(dedup_.row_occurrences(), row_occurrences_.data());
  absl::Status s = backend_->Synchronize();
  if (!s.ok()) prepared_ = false;  // the device copy is incomplete
  return s;
}

absl::Status CtrReplica::CheckInputs(const float* dense_params,
                                     const float* rows) const {
  if (!prepared_) {
    return absl::FailedPreconditionError("no batch: call Prepare first");
  }
  if (dense_params == nullptr) {
    return absl::InvalidArgumentError("dense_params is null");
  }
  if (num_unique() > 0 && rows == nullptr) {
    return absl::InvalidArgumentError("rows is null");
  }
  return absl::OkStatus();
}

CtrReplica::Inputs CtrReplica::Stage(const float* dense_params,
                                     const float* rows) {
  const size_t unique = num_unique();
  if (!backend_->host_memory()) {
    std::memcpy(host_params_.data(), dense_params,
                num_parameters_ * sizeof(float));
    backend_->CopyToDevice(static_cast<const float*>(host_params_.data()),
                           num_parameters_, params_.data());
    std::memcpy(host_rows_.data(), rows, unique * dim_ * sizeof(float));
    backend_->CopyToDevice(static_cast<const float*>(host_rows_.data()),
                           unique * dim_, rows_.data());
    EmbeddingBatch batch;
    batch.num_bags = dedup_.num_bags();
    batch.num_rows = dedup_.num_unique();
    batch.num_indices = dedup_.num_indices();
    batch.offsets = offsets_.data();
    batch.indices = indices_.data();
    batch.row_offsets = row_offsets_.data();
    batch.row_occurrences = row_occurrences_.data();
    return Inputs{params_.data(), rows_.data(), batch};
  }
  return Inputs{dense_params, rows, dedup_.batch()};
}

absl::StatusOr<const float*> CtrReplica::Forward(const Inputs& in) {
  const int rows = static_cast<int>(batch_size_);
  const int stride = static_cast<int>(input_dim());
  // The fields' embeddings side by side from column 0; Prepare put the
  // dense features after them.
  backend_->EmbeddingBagForward(Pooling::kSum, in.batch, dim_, in.rows, fields_,
                                stride, x_.data());
  const float* h = x_.data();
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& layer = layers_[l];
    float* out = acts_[l].data();
    backend_->Gemm(Transpose::kNo, Transpose::kNo, rows, layer.out, layer.in,
                   1.0f, h, layer.in, in.params + layer.w_offset, layer.out,
                   0.0f, out, layer.out);
    if (l + 1 < layers_.size()) {
      backend_->BiasRelu(rows, layer.out, in.params + layer.b_offset, out);
    } else {
      backend_->BiasAdd(rows, layer.out, in.params + layer.b_offset, out);
    }
    h = out;
  }
  const float* logits = acts_.back().data();  // rows x 1
  if (!backend_->host_memory()) {
    backend_->CopyToHost(logits, batch_size_, host_logits_.data());
    logits = host_logits_.data();
  }
  PS_RETURN_IF_ERROR(backend_->Synchronize());
  return logits;
}

void CtrReplica::Backward(const Inputs& in, float* grad, float* row_grads) {
  const int rows = static_cast<int>(batch_size_);
  int cur = 0;  // delta_[0] holds d(loss)/d(logits)
  for (size_t l = layers_.size(); l-- > 0;) {
    const Layer& layer = layers_[l];
    const float* h = l == 0 ? x_.data() : acts_[l - 1].data();
    const float* delta = delta_[cur].data();
    // dW = h^T delta, db = column sums of delta.
    backend_->Gemm(Transpose::kYes, Transpose::kNo, layer.in, layer.out, rows,
                   1.0f, h, layer.in, delta, layer.out, 0.0f,
                   grad + layer.w_offset, layer.out);
    backend_->ColumnSums(rows, layer.out, 1.0f, delta, 0.0f,
                         grad + layer.b_offset);
    // d(h) = delta W^T; below layer 0 it is d(input), which has no ReLU.
    float* next = delta_[1 - cur].data();
    backend_->Gemm(Transpose::kNo, Transpose::kYes, rows, layer.in, layer.out,
                   1.0f, delta, layer.out, in.params + layer.w_offset,
                   layer.out, 0.0f, next, layer.in);
    if (l > 0) {
      backend_->ReluBackward(static_cast<size_t>(rows) * layer.in, h, next,
                             next);
    }
    cur = 1 - cur;
  }
  // The embedding columns of d(input) go to the unique rows, summed over
  // each id's occurrences; the dense columns are not needed.
  backend_->EmbeddingBagBackward(Pooling::kSum, in.batch, dim_,
                                 delta_[cur].data(), fields_,
                                 static_cast<int>(input_dim()), row_grads);
}

absl::Status CtrReplica::ComputeGradient(const float* dense_params,
                                         const float* rows, float* dense_grad,
                                         float* row_grads, double* loss_sum,
                                         float grad_scale) {
  PS_RETURN_IF_ERROR(CheckInputs(dense_params, rows));
  if (dense_grad == nullptr) {
    return absl::InvalidArgumentError("dense_grad is null");
  }
  const size_t unique = num_unique();
  if (unique > 0 && row_grads == nullptr) {
    return absl::InvalidArgumentError("row_grads is null");
  }
  if (batch_size_ == 0) {
    std::fill(dense_grad, dense_grad + num_parameters_, 0.0f);
    if (loss_sum != nullptr) *loss_sum = 0.0;
    return absl::OkStatus();
  }
  const bool host = backend_->host_memory();
  const Inputs in = Stage(dense_params, rows);
  PS_ASSIGN_OR_RETURN(const float* logits, Forward(in));
  float* delta = host ? delta_[0].data() : host_delta_.data();
  const double loss = LogisticLossAndGrad(batch_size_, logits, labels_.data(),
                                          grad_scale, delta);
  if (!host) {
    backend_->CopyToDevice(static_cast<const float*>(host_delta_.data()),
                           batch_size_, delta_[0].data());
  }
  Backward(in, host ? dense_grad : grad_.data(),
           host ? row_grads : row_grads_.data());
  if (!host) {
    backend_->CopyToHost(static_cast<const float*>(grad_.data()),
                         num_parameters_, host_grad_.data());
    backend_->CopyToHost(static_cast<const float*>(row_grads_.data()),
                         unique * dim_, host_row_grads_.data());
  }
  PS_RETURN_IF_ERROR(backend_->Synchronize());
  if (!host) {
    std::memcpy(dense_grad, host_grad_.data(), num_parameters_ * sizeof(float));
    std::memcpy(row_grads, host_row_grads_.data(),
                unique * dim_ * sizeof(float));
  }
  if (loss_sum != nullptr) *loss_sum = loss;
  return absl::OkStatus();
}

absl::Status CtrReplica::Predict(const float* dense_params, const float* rows,
                                 float* probs) {
  PS_RETURN_IF_ERROR(CheckInputs(dense_params, rows));
  if (batch_size_ > 0 && probs == nullptr) {
    return absl::InvalidArgumentError("probs is null");
  }
  if (batch_size_ == 0) return absl::OkStatus();
  PS_ASSIGN_OR_RETURN(const float* logits, Forward(Stage(dense_params, rows)));
  for (size_t i = 0; i < batch_size_; ++i) {
    probs[i] = static_cast<float>(Sigmoid(logits[i]));
  }
  return absl::OkStatus();
}

}  // namespace ps
