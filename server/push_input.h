// A push's gradients as the shard reads them (Shard::PushPull, Push):
// ChunkData's fields, with each payload left where it arrived instead of
// copied into a message. The RPC layer decodes requests into this straight
// from gRPC's receive slices (server/rpc/push_decoder.h); a request message
// (tests, the Push RPC) is viewed in place by GradientsFrom.
//
//   GradientsIn in = GradientsFrom(req.gradients());  // borrows req
//   shard.PushPull(req, std::move(in), &resp, done);
#ifndef SERVER_PUSH_INPUT_H_
#define SERVER_PUSH_INPUT_H_

#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "core/float_bytes.h"
#include "proto/ps.pb.h"

namespace ps {

struct GradientIn {
  uint32_t chunk_id = 0;
  uint64_t version = 0;
  int format = 0;  // WireFormat
  // The payload: in pieces only for plain (dense FP32) gradients; any other
  // format arrives in one piece. With `data.keep` set, a BSP shard keeps
  // the pieces until its step is applied instead of copying them.
  BytePieces data;
  absl::string_view indices;  // sparse offsets, in one piece
  bool has_base_version = false;

  // Dense FP32: floats, read in place (no decoding).
  bool plain() const;
  // The payload in one view; only for a payload in at most one piece.
  absl::string_view flat_data() const {
    return data.pieces.empty() ? absl::string_view() : data.pieces.front();
  }
};
using GradientsIn = std::vector<GradientIn>;

// `list` viewed in place (no keep): valid while `list` is.
GradientsIn GradientsFrom(
    const google::protobuf::RepeatedPtrField<ChunkData>& list);

}  // namespace ps

#endif  // SERVER_PUSH_INPUT_H_
