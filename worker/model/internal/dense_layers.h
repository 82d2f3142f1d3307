// The flat layout of a stack of dense layers (core/model_spec.h): layer i
// is W [widths[i] x widths[i + 1]] then b [widths[i + 1]], one after the
// other. Shared by Model and CtrReplica.
//
//   size_t num_parameters = 0;
//   std::vector<DenseLayer> layers = DenseLayers(widths, &num_parameters);
#ifndef WORKER_MODEL_INTERNAL_DENSE_LAYERS_H_
#define WORKER_MODEL_INTERNAL_DENSE_LAYERS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ps {
namespace model_internal {

// One dense layer; offsets index the flat parameter layout.
struct DenseLayer {
  int in;
  int out;
  size_t w_offset;  // in * out floats, then the bias
  size_t b_offset;  // out floats
};

// The layers of `widths` (at least one layer: widths.size() >= 2) and, in
// *num_parameters, the floats they hold together.
inline std::vector<DenseLayer> DenseLayers(const std::vector<uint32_t>& widths,
                                           size_t* num_parameters) {
  std::vector<DenseLayer> layers;
  size_t offset = 0;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    DenseLayer layer;
    layer.in = static_cast<int>(widths[i]);
    layer.out = static_cast<int>(widths[i + 1]);
    layer.w_offset = offset;
    offset += static_cast<size_t>(layer.in) * layer.out;
    layer.b_offset = offset;
    offset += layer.out;
    layers.push_back(layer);
  }
  *num_parameters = offset;
  return layers;
}

}  // namespace model_internal
}  // namespace ps

#endif  // WORKER_MODEL_INTERNAL_DENSE_LAYERS_H_
