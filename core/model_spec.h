// The tensors a model is made of, and the checks on a ModelSpec. The
// coordinator calls both at submit time (to validate and to fill
// JobSpec.tensors for placement); the worker's Model uses the same layout.
//
//   absl::Status s = ValidateModelSpec(job.model());
//   if (!s.ok()) return s;  // "model.mlp.hidden[1]: must be > 0"
//   for (const TensorSpec& t : ModelTensors(job.model())) ...
//
// Layout. Both models are stacks of dense layers fc0, fc1, ...: softmax
// regression is fc0 alone (input_dim -> num_classes); an MLP is input_dim ->
// hidden[0] -> ... -> num_classes with ReLU after every layer but the last.
// Layer i contributes "fc<i>/w" [in, out] (row-major, GLOROT_UNIFORM) then
// "fc<i>/b" [out] (ZEROS). The FLAT LAYOUT concatenates the tensors in that
// order; a parameter or gradient vector is num_parameters floats in it.
//
// The CTR model (ModelSpec.ctr) is an MLP over fields * embedding_dim +
// dense_features inputs (the sparse table's rows, then the dense features)
// with hidden layers and one output (a logit): fc0, fc1, ... as above. Its
// embedding rows live in a sparse table (core/table_spec.h), not here.
//
// The CNN (ModelSpec.cnn) puts conv layers conv0, conv1, ... before such a
// stack: conv layer i contributes "conv<i>/w" [k * k * c_in, filters]
// (HE_NORMAL, fan_in k * k * c_in) then "conv<i>/b" [filters] (ZEROS), ahead
// of the fc tensors in the flat layout. Images and activations are NHWC
// (row, column, channel); the last conv layer's pooled output, flattened in
// that order, is the input of fc0. CnnConvLayers gives each layer's shapes.
//
// The lab model (ModelSpec.lab, proto/job.proto) is no stack of dense layers:
// layer i contributes "lab<i>/w" [parameters / layers - kLabBiasSize] then
// "lab<i>/b" [kLabBiasSize], both 1-D and ZEROS: tools/lab/allreduce_peer.py's
// layout(), tensor for tensor. It has no layer widths.
//
// A custom model (ModelSpec.custom, a user's own model trained by Python
// workers) is its tensors as listed, in that order; no layer widths.

#ifndef CORE_MODEL_SPEC_H_
#define CORE_MODEL_SPEC_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "proto/job.pb.h"

namespace ps {

// Largest accepted layer width / input dimension: far beyond any model this
// system trains, small enough that sizes never overflow int arithmetic in
// BLAS calls.
inline constexpr uint32_t kMaxModelDim = 1u << 24;
// Largest accepted parameter count (4 GiB of float32).
inline constexpr uint64_t kMaxModelParameters = uint64_t{1} << 30;

// The CTR model's and sparse tables' limits.
inline constexpr uint32_t kMaxCtrFields = 1024;
inline constexpr uint32_t kMaxTableDim = 4096;

// A custom model's limits (ModelSpec.custom, a user's own tensors).
inline constexpr size_t kMaxTensorNameLength = 256;
inline constexpr int kMaxTensorRank = 8;

// The lab model's limits (see the file comment).
inline constexpr uint64_t kLabBiasSize = 1024;
inline constexpr uint32_t kMaxLabLayers = 1024;
inline constexpr double kMaxLabComputeMs = 60000;

// The CNN's limit on a conv layer's output channels (and so on each of
// its tensors' rows, k * k * c_in <= kMaxModelDim as well).
inline constexpr uint32_t kMaxCnnFilters = 1u << 16;
// The CNN's limit on one example's im2col patches (height * width * k * k *
// c_in floats of a conv layer): keeps the workers' GEMM sizes within int.
inline constexpr uint64_t kMaxCnnPatchFloats = uint64_t{1} << 28;

// One conv layer of a CNN: a k x k "same" convolution of an in_h x in_w x
// in_c image (zero padding (k - 1) / 2, stride 1), ReLU, then pool x pool max
// pooling with stride pool to out_h x out_w x filters (floor: rows and
// columns past the last whole window are dropped).
struct ConvLayerShape {
  uint32_t in_h, in_w, in_c;
  uint32_t kernel, filters, pool;
  uint32_t out_h, out_w;
};

// The conv layers of a valid CNN spec (ValidateModelSpec OK), in order.
std::vector<ConvLayerShape> CnnConvLayers(const Cnn& cnn);

// OK when `spec` names a model with sane sizes; else kInvalidArgument naming
// the field, e.g. "model.softmax.num_classes: must be >= 2, got 1".
absl::Status ValidateModelSpec(const ModelSpec& spec);

// The layer widths [input_dim, hidden..., num_classes] of a valid softmax,
// MLP or CTR spec (CTR: [fields * embedding_dim + dense_features, hidden...,
// 1], defaults filled in; CNN: the dense layers after the convs, [out_h *
// out_w * filters of the last conv, hidden..., num_classes]); empty when
// ValidateModelSpec(spec) fails and for a lab model.
std::vector<uint32_t> ModelLayerWidths(const ModelSpec& spec);

// The model's tensors in flat layout order (see the file comment); empty
// when ValidateModelSpec(spec) fails.
std::vector<TensorSpec> ModelTensors(const ModelSpec& spec);

// Total elements of `tensors` (product of each shape, summed).
uint64_t NumParameters(const std::vector<TensorSpec>& tensors);

}  // namespace ps

#endif  // CORE_MODEL_SPEC_H_
