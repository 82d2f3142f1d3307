#include "core/model_spec.h"

#include <cmath>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/defaults.h"
#include "common/status_macros.h"
#include "core/init.h"

namespace ps {
namespace {

absl::Status CheckDim(const std::string& field, uint32_t value, uint32_t min) {
  if (value < min) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must be ", min == 1 ? "> 0" : ">= 2",
                     value == 0 ? "" : absl::StrCat(", got ", value)));
  }
  if (value > kMaxModelDim) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": ", value, " exceeds the limit of ", kMaxModelDim));
  }
  return absl::OkStatus();
}

absl::Status CheckLab(const LabModel& m) {
  if (m.layers() < 1 || m.layers() > kMaxLabLayers) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.lab.layers: must be in [1, ", kMaxLabLayers,
                     "], got ", m.layers()));
  }
  // Each layer needs a weight of at least one float besides its bias.
  const uint64_t min = uint64_t{m.layers()} * (kLabBiasSize + 1);
  if (m.parameters() < min || m.parameters() > kMaxModelParameters) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.lab.parameters: must be in [", min, ", ", kMaxModelParameters,
        "] for ", m.layers(), " layers (", kLabBiasSize + 1,
        "+ floats per layer), got ", m.parameters()));
  }
  if (!std::isfinite(m.compute_ms()) || m.compute_ms() < 0 ||
      m.compute_ms() > kMaxLabComputeMs) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.lab.compute_ms: must be in [0, ", kMaxLabComputeMs,
                     "], got ", m.compute_ms()));
  }
  if (m.steps_per_epoch() < 1) {
    return absl::InvalidArgumentError(
        "model.lab.steps_per_epoch: must be >= 1");
  }
  return absl::OkStatus();
}

std::vector<TensorSpec> LabTensors(const LabModel& m) {
  const uint64_t per_layer = m.parameters() / m.layers();
  std::vector<TensorSpec> tensors;
  for (uint32_t i = 0; i < m.layers(); ++i) {
    TensorSpec w;
    w.set_name(absl::StrCat("lab", i, "/w"));
    w.add_shape(per_layer - kLabBiasSize);
    w.mutable_init()->set_kind(ZEROS);
    tensors.push_back(std::move(w));
    TensorSpec b;
    b.set_name(absl::StrCat("lab", i, "/b"));
    b.add_shape(kLabBiasSize);
    b.mutable_init()->set_kind(ZEROS);
    tensors.push_back(std::move(b));
  }
  return tensors;
}

bool CustomNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' ||
         c == '/' || c == ':';
}

absl::Status CheckCustomName(const std::string& field,
                             const std::string& name) {
  if (name.empty() || name.size() > kMaxTensorNameLength) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must have 1 to ", kMaxTensorNameLength,
                     " characters, got ", name.size()));
  }
  for (char c : name) {
    if (!CustomNameChar(c)) {
      // CHexEscape: a hostile name must not reach a terminal raw.
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": invalid character '", absl::CHexEscape(std::string(1, c)),
          "' in \"", absl::CHexEscape(name),
          "\" (use letters, digits and - _ . / :)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckCustom(const CustomModel& m) {
  if (m.tensors_size() == 0) {
    return absl::InvalidArgumentError(
        "model.custom.tensors: must list at least one tensor");
  }
  absl::flat_hash_set<std::string> names;
  uint64_t params = 0;
  for (int i = 0; i < m.tensors_size(); ++i) {
    const TensorSpec& t = m.tensors(i);
    const std::string field = absl::StrCat("model.custom.tensors[", i, "]");
    PS_RETURN_IF_ERROR(CheckCustomName(absl::StrCat(field, ".name"), t.name()));
    if (!names.insert(t.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".name: \"", t.name(), "\" is listed twice"));
    }
    if (t.shape_size() < 1 || t.shape_size() > kMaxTensorRank) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".shape: must have 1 to ", kMaxTensorRank,
                       " dimensions, got ", t.shape_size()));
    }
    uint64_t size = 1;
    for (int d = 0; d < t.shape_size(); ++d) {
      if (t.shape(d) == 0 || t.shape(d) > kMaxModelParameters) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".shape[", d, "]: must be in [1, ",
                         kMaxModelParameters, "], got ", t.shape(d)));
      }
      size *= t.shape(d);  // <= 2^30 * 2^30: no overflow before the check
      if (size > kMaxModelParameters) break;
    }
    params += size;
    if (size > kMaxModelParameters || params > kMaxModelParameters) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model: more than ", kMaxModelParameters,
          " parameters (the limit) by ", field, " \"", t.name(), "\""));
    }
    if (t.init().kind() == INIT_UNSPECIFIED) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".init.kind: must be set"));
    }
    if (absl::Status s = ValidateInit(t); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".", s.message()));
    }
  }
  return absl::OkStatus();
}

// A CtrModel's fields with their defaults filled in.
uint32_t CtrFields(const CtrModel& m) {
  return m.has_fields() ? m.fields() : kDefaultCtrFields;
}
uint32_t CtrDense(const CtrModel& m) {
  return m.has_dense_features() ? m.dense_features() : kDefaultCtrDenseFeatures;
}

absl::Status CheckCtr(const CtrModel& m) {
  if (m.table().empty()) {
    return absl::InvalidArgumentError(
        "model.ctr.table: must name one of the job's tables");
  }
  if (m.embedding_dim() < 1 || m.embedding_dim() > kMaxTableDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.ctr.embedding_dim: must be in [1, ", kMaxTableDim,
                     "], got ", m.embedding_dim()));
  }
  if (CtrFields(m) < 1 || CtrFields(m) > kMaxCtrFields) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.ctr.fields: must be in [1, ", kMaxCtrFields,
                     "], got ", CtrFields(m)));
  }
  if (CtrDense(m) > kMaxModelDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.ctr.dense_features: ", CtrDense(m),
                     " exceeds the limit of ", kMaxModelDim));
  }
  for (int i = 0; i < m.hidden_size(); ++i) {
    PS_RETURN_IF_ERROR(
        CheckDim(absl::StrCat("model.ctr.hidden[", i, "]"), m.hidden(i), 1));
  }
  return absl::OkStatus();
}

// Widths without the validity check.
std::vector<uint32_t> Widths(const ModelSpec& spec) {
  std::vector<uint32_t> widths;
  if (spec.has_softmax()) {
    widths = {spec.softmax().input_dim(), spec.softmax().num_classes()};
  } else if (spec.has_mlp()) {
    widths.push_back(spec.mlp().input_dim());
    for (uint32_t h : spec.mlp().hidden()) widths.push_back(h);
    widths.push_back(spec.mlp().num_classes());
  } else if (spec.has_ctr()) {
    const CtrModel& m = spec.ctr();
    widths.push_back(CtrFields(m) * m.embedding_dim() + CtrDense(m));
    if (m.hidden_size() == 0) {
      for (uint32_t h : kDefaultCtrHidden) widths.push_back(h);
    }
    for (uint32_t h : m.hidden()) widths.push_back(h);
    widths.push_back(1);  // one logit
  }
  return widths;
}

}  // namespace

absl::Status ValidateModelSpec(const ModelSpec& spec) {
  if (spec.has_softmax()) {
    const SoftmaxRegression& m = spec.softmax();
    PS_RETURN_IF_ERROR(CheckDim("model.softmax.input_dim", m.input_dim(), 1));
    PS_RETURN_IF_ERROR(
        CheckDim("model.softmax.num_classes", m.num_classes(), 2));
  } else if (spec.has_mlp()) {
    const Mlp& m = spec.mlp();
    PS_RETURN_IF_ERROR(CheckDim("model.mlp.input_dim", m.input_dim(), 1));
    for (int i = 0; i < m.hidden_size(); ++i) {
      PS_RETURN_IF_ERROR(
          CheckDim(absl::StrCat("model.mlp.hidden[", i, "]"), m.hidden(i), 1));
    }
    PS_RETURN_IF_ERROR(CheckDim("model.mlp.num_classes", m.num_classes(), 2));
  } else if (spec.has_lab()) {
    return CheckLab(spec.lab());
  } else if (spec.has_ctr()) {
    PS_RETURN_IF_ERROR(CheckCtr(spec.ctr()));
  } else if (spec.has_custom()) {
    return CheckCustom(spec.custom());
  } else {
    return absl::InvalidArgumentError(
        "model: no model set (want softmax, mlp, lab, ctr or custom)");
  }
  const std::vector<uint32_t> widths = Widths(spec);
  uint64_t params = 0;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    // Each term is < 2^48 + 2^24 (dims <= 2^24), the running sum stays far
    // from overflow because it is checked after every layer.
    params += uint64_t{widths[i]} * widths[i + 1] + widths[i + 1];
    if (params > kMaxModelParameters) {
      return absl::InvalidArgumentError(
          absl::StrCat("model: more than ", kMaxModelParameters,
                       " parameters (the limit) by layer fc", i));
    }
  }
  return absl::OkStatus();
}

std::vector<uint32_t> ModelLayerWidths(const ModelSpec& spec) {
  if (!ValidateModelSpec(spec).ok()) return {};
  return Widths(spec);
}

std::vector<TensorSpec> ModelTensors(const ModelSpec& spec) {
  if (spec.has_lab()) {
    if (!ValidateModelSpec(spec).ok()) return {};
    return LabTensors(spec.lab());
  }
  if (spec.has_custom()) {
    if (!ValidateModelSpec(spec).ok()) return {};
    return {spec.custom().tensors().begin(), spec.custom().tensors().end()};
  }
  const std::vector<uint32_t> widths = ModelLayerWidths(spec);
  std::vector<TensorSpec> tensors;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    TensorSpec w;
    w.set_name(absl::StrCat("fc", i, "/w"));
    w.add_shape(widths[i]);
    w.add_shape(widths[i + 1]);
    w.mutable_init()->set_kind(GLOROT_UNIFORM);
    tensors.push_back(std::move(w));
    TensorSpec b;
    b.set_name(absl::StrCat("fc", i, "/b"));
    b.add_shape(widths[i + 1]);
    b.mutable_init()->set_kind(ZEROS);
    tensors.push_back(std::move(b));
  }
  return tensors;
}

uint64_t NumParameters(const std::vector<TensorSpec>& tensors) {
  uint64_t total = 0;
  for (const TensorSpec& t : tensors) {
    uint64_t size = 1;
    for (uint64_t d : t.shape()) size *= d;
    total += size;
  }
  return total;
}

}  // namespace ps
