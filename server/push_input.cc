#include "server/push_input.h"

#include "core/wire_format.h"

namespace ps {

bool GradientIn::plain() const {
  return indices.empty() && Resolved(static_cast<WireFormat>(format)) == FP32;
}

GradientsIn GradientsFrom(
    const google::protobuf::RepeatedPtrField<ChunkData>& list) {
  GradientsIn out(static_cast<size_t>(list.size()));
  for (int i = 0; i < list.size(); ++i) {
    const ChunkData& c = list[i];
    GradientIn& g = out[static_cast<size_t>(i)];
    g.chunk_id = c.chunk_id();
    g.version = c.version();
    g.format = c.format();
    if (!c.data().empty()) g.data.pieces.push_back(c.data());
    g.indices = c.indices();
    g.has_base_version = c.has_base_version();
  }
  return out;
}

}  // namespace ps
