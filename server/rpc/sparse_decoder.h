// Decodes a SparseExchangeRequest from its wire bytes as gRPC received them
// (in pieces) into the tables' own form (server/sparse/sparse_request.h):
// each SparseRows' ids and values are copied once, straight from the pieces
// into the aligned vectors the tables keep, instead of protobuf's parse
// into strings followed by the tables' copy out of them. Accepts what
// protobuf's parser accepts (fields in any order, unknown fields, a
// repeated scalar's or bytes field's last value wins, a known field with
// another wire type skipped as unknown) and refuses what it refuses
// (truncation, malformed varints, strings not UTF-8); like
// core/wire_codec.h's reader it also refuses groups, which proto3 does not
// have (protobuf would keep them as unknown fields).
//
//   SparseRequestIn req;
//   PS_RETURN_IF_ERROR(DecodeSparseExchangeRequest(pieces, &req));
//   shard.SparseExchange(&req, &reply, done);
#ifndef SERVER_RPC_SPARSE_DECODER_H_
#define SERVER_RPC_SPARSE_DECODER_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "server/sparse/sparse_request.h"

namespace ps {

// Fills `req` (reset first). Malformed input is kInvalidArgument naming
// what broke and its byte offset; `req` is then unspecified.
absl::Status DecodeSparseExchangeRequest(
    absl::Span<const absl::string_view> pieces, SparseRequestIn* req);

}  // namespace ps

#endif  // SERVER_RPC_SPARSE_DECODER_H_
