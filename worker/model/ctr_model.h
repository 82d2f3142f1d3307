// One replica of the click-through-rate model (ModelSpec.ctr, see
// proto/job.proto and core/model_spec.h) on one Backend: `fields` embedding
// rows and `dense_features` floats per example -> an MLP of ReLU layers ->
// one logit -> logistic loss. The dense layers fc0, fc1, ... use the flat
// layout of ModelTensors(spec); the embedding rows live in a sparse table on
// the shards, so a step has two calls:
//
//   absl::StatusOr<std::unique_ptr<CtrReplica>> m =
//       CtrReplica::Create(job.model(), backend.get(), /*max_batch=*/512);
//   PS_RETURN_IF_ERROR((*m)->Prepare(batch));         // de-duplicates ids
//   absl::Span<const uint64_t> ids = (*m)->unique_ids();
//   Pull(ids, rows.data());                            // U x dim, that order
//   PS_RETURN_IF_ERROR((*m)->ComputeGradient(params.data(), rows.data(),
//       dense_grad.data(), row_grads.data(), &loss_sum, 1.0f / global_batch));
//   Push(ids, row_grads.data());                       // U x dim
//
// The MLP input of example b is [emb(ids[b][0]) ... emb(ids[b][F-1]) dense[b]]
// (fields side by side, f at column f * dim, then the dense features at
// column F * dim), built by Backend::EmbeddingBagForward (SUM pooling, one id
// per bag) over the batch's unique rows. Backward runs through the MLP down
// to d(input) and EmbeddingBagBackward turns that into one gradient row per
// unique id: an id used by several examples gets the sum of their shares.
//
// Loss per example, z the logit and y the label in {0, 1}:
//   log1p(exp(-|z|)) + max(z, 0) - z * y      (= -log sigmoid(z) if y = 1,
//                                                -log(1 - sigmoid(z)) if 0)
// with d/dz = sigmoid(z) - y. The loss and its gradient are computed on the
// host (one float per example each way), in the same code for every backend.
//
// Determinism: every result is a deterministic function of the inputs (the
// embedding ops never use atomics; the loss is summed in example order), so
// equal inputs give equal bits on one backend with a fixed BLAS thread count.
// The host path (CPU) and the device path (staging through HostBuffers) run
// the same arithmetic and agree bit for bit on the same BLAS.
//
// Costs. Buffers for max_batch examples (and max_batch * fields unique rows)
// are allocated once in Create; a call allocates nothing after the first
// batches have grown the de-duplication table. A batch larger than max_batch
// is rejected (kInvalidArgument): the row gradient of an id needs all its
// occurrences in one EmbeddingBagBackward, so batches are not chunked. On a
// host-memory backend (CPU) params, rows and gradients are used in place; on
// a GPU they go through page-locked staging, and the step synchronizes once
// mid-way (logits down, d(logits) up).
//
// Thread-safety: not thread-safe; one thread drives a CtrReplica (and its
// Backend). Models on distinct backends may run concurrently.

#ifndef WORKER_MODEL_CTR_MODEL_H_
#define WORKER_MODEL_CTR_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/job.pb.h"
#include "worker/backend/backend.h"
#include "worker/data/ctr_example.h"
#include "worker/model/id_dedup.h"
#include "worker/model/internal/dense_layers.h"

namespace ps {

// Named CtrReplica: ps::CtrModel is the proto message (proto/job.proto).
class CtrReplica {
 public:
  // Largest accepted max_batch (keeps max_batch * fields within int32 for
  // the embedding batch and row counts within int for BLAS).
  static constexpr size_t kMaxBatch = size_t{1} << 20;

  // A replica of `spec` (which must hold a ctr model) on `backend`
  // (borrowed; must outlive the model). kInvalidArgument for an invalid
  // spec (field named), a model other than ctr, a null backend or max_batch
  // outside [1, kMaxBatch]; kResourceExhausted when the buffers do not fit
  // the device.
  static absl::StatusOr<std::unique_ptr<CtrReplica>> Create(
      const ModelSpec& spec, Backend* backend, size_t max_batch);

  CtrReplica(const CtrReplica&) = delete;
  CtrReplica& operator=(const CtrReplica&) = delete;

  // The dense tensors in flat layout order (ModelTensors(spec)).
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  size_t num_parameters() const { return num_parameters_; }
  int fields() const { return fields_; }
  int embedding_dim() const { return dim_; }
  int dense_features() const { return dense_features_; }
  // fields() * embedding_dim() + dense_features(): the MLP's input width.
  size_t input_dim() const { return widths_.front(); }
  size_t max_batch() const { return max_batch_; }
  Backend* backend() const { return backend_; }

  // Takes in the next batch: checks it, de-duplicates its ids and keeps its
  // labels and dense features (the caller may reuse `batch` afterwards).
  // The batch holds fields() ids and dense_features() floats per example
  // (batch.ids[b * fields() + f], batch.dense[b * dense_features() + j];
  // CtrBatch::Resize sizes them for Criteo's 26 and 13, the defaults).
  // kInvalidArgument naming the field for batch.size > max_batch(), a
  // labels/dense/ids vector of the wrong length, a label other than 0 or 1
  // or a dense feature that is not finite; the previously prepared batch is
  // then kept. Blocks (uploads to the device on a GPU).
  absl::Status Prepare(const CtrBatch& batch);

  // Examples in the prepared batch (0 before the first Prepare).
  size_t batch_size() const { return batch_size_; }
  // The prepared batch's distinct ids in first-occurrence order (example
  // major, field minor): the rows the caller passes to ComputeGradient and
  // Predict, and the order of row_grads. Valid until the next successful
  // Prepare.
  absl::Span<const uint64_t> unique_ids() const { return dedup_.unique_ids(); }
  size_t num_unique() const { return dedup_.unique_ids().size(); }

  // grad_scale times the gradient of the SUM of the prepared batch's
  // per-example logistic losses (pass 1 / N for the mean over a global batch
  // of N; the scale is applied once, to d(loss)/d(logit), as in Model).
  // dense_params/dense_grad: num_parameters() host floats in flat layout;
  // rows/row_grads: num_unique() x embedding_dim() host floats, row u for
  // unique_ids()[u] (may be null when num_unique() == 0). *loss_sum (may be
  // null) receives the unscaled summed loss. An empty batch gives zero
  // gradients and loss. kInvalidArgument for a null buffer;
  // kFailedPrecondition before Prepare. Blocks until done.
  absl::Status ComputeGradient(const float* dense_params, const float* rows,
                               float* dense_grad, float* row_grads,
                               double* loss_sum, float grad_scale = 1.0f);

  // Forward pass only: probs[b] = sigmoid(logit of example b) for the
  // batch_size() examples of the prepared batch (for AUC and logloss).
  // Buffers and errors as ComputeGradient's. Blocks until done.
  absl::Status Predict(const float* dense_params, const float* rows,
                       float* probs);

 private:
  using Layer = model_internal::DenseLayer;
  // Backend pointers of one call's inputs.
  struct Inputs {
    const float* params;
    const float* rows;
    EmbeddingBatch batch;
  };

  CtrReplica(Backend* backend, size_t max_batch, int fields, int dim,
             int dense_features, std::vector<uint32_t> widths,
             std::vector<TensorSpec> tensors);
  absl::Status Allocate();
  // kFailedPrecondition before Prepare; kInvalidArgument for a null input.
  absl::Status CheckInputs(const float* dense_params, const float* rows) const;
  // The backend pointers of checked inputs; on a device, enqueues their
  // upload through staging.
  Inputs Stage(const float* dense_params, const float* rows);
  // Enqueues the embedding lookup and the MLP over the prepared batch, then
  // waits and returns the batch_size() logits (host memory).
  absl::StatusOr<const float*> Forward(const Inputs& in);
  // Enqueues backward from d(logits) in delta_[0] into grad and row_grads
  // (backend memory).
  void Backward(const Inputs& in, float* grad, float* row_grads);

  Backend* const backend_;  // borrowed
  const size_t max_batch_;
  const int fields_;
  const int dim_;
  const int dense_features_;
  const std::vector<uint32_t> widths_;  // input, hidden..., 1
  const std::vector<TensorSpec> tensors_;
  std::vector<Layer> layers_;
  size_t num_parameters_ = 0;
  size_t max_width_ = 0;  // widest of the input and the layer outputs
  size_t max_rows_ = 0;   // max_batch * fields: the most unique ids

  // The prepared batch.
  IdDedup dedup_;
  std::vector<float> labels_;
  size_t batch_size_ = 0;
  bool prepared_ = false;

  // Backend memory.
  DeviceBuffer<float> x_;                  // max_batch x input_dim
  std::vector<DeviceBuffer<float>> acts_;  // per layer, max_batch x out
  DeviceBuffer<float> delta_[2];           // backward ping-pong
  // Only on backends without host memory: device copies and their staging.
  DeviceBuffer<float> params_;
  DeviceBuffer<float> grad_;
  DeviceBuffer<float> rows_;
  DeviceBuffer<float> row_grads_;
  DeviceBuffer<int32_t> offsets_;  // 0, 1, ..., max_rows: one id per bag
  DeviceBuffer<int32_t> indices_;
  DeviceBuffer<int32_t> row_offsets_;
  DeviceBuffer<int32_t> row_occurrences_;
  HostBuffer<float> host_x_;  // dense columns only
  HostBuffer<float> host_params_;
  HostBuffer<float> host_grad_;
  HostBuffer<float> host_rows_;
  HostBuffer<float> host_row_grads_;
  HostBuffer<float> host_logits_;
  HostBuffer<float> host_delta_;
  HostBuffer<int32_t> host_index_;  // indices, row_offsets, row_occurrences
};

}  // namespace ps

#endif  // WORKER_MODEL_CTR_MODEL_H_
