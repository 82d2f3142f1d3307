// An encoded message's pieces (core/wire_codec.h's WirePiece) as gRPC send
// slices, without copying a borrowed payload. The one policy that differs
// between callers is how a borrowed piece's memory outlives the send: the
// caller's `borrow` makes that slice (a static slice over a buffer the
// call keeps, or one whose destroy callback drops a reference).
//
//   std::vector<WirePiece> pieces;
//   EncodeChunkList(tag, refs, copy_below, &head, &pieces);
//   grpc::ByteBuffer buf = ToSendBuffer(pieces, std::move(head), StaticSlice);
#ifndef CORE_WIRE_SLICES_H_
#define CORE_WIRE_SLICES_H_

#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "core/wire_codec.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace ps {

// A slice over `bytes` that gRPC neither copies nor frees: the caller keeps
// them unchanged until gRPC is done with the message (a unary call's
// completion callback runs after that).
grpc::Slice StaticSlice(absl::string_view bytes);

// `pieces` in order, then `tail` (the fields after them) when not empty:
// owned pieces are moved in, borrowed ones become borrow(piece).
grpc::ByteBuffer ToSendBuffer(
    std::vector<WirePiece>& pieces, std::string tail,
    absl::FunctionRef<grpc::Slice(absl::string_view)> borrow);

}  // namespace ps

#endif  // CORE_WIRE_SLICES_H_
