// The messages of one SparseExchange call (proto/ps.proto), hand-encoded
// with core/sparse_rows_codec for the raw path, as worker/client/shard_wire.h
// does for the dense calls: the request's ids and gradient rows go as
// slices borrowing the caller's buffers (no serialization copy), and the
// reply's rows are read in place from the received slices, each row copied
// once, straight to where the caller wants it. No sockets.
//
//   std::vector<SparseRowsOut> grads = ..., pulls = ...;
//   grpc::ByteBuffer req = EncodeSparseRequest(head, grads, pulls);
//   // or, over buffers the caller owns in another form:
//   SparseRowsRef g{"emb", ids_span, values_span}, p{"emb", ids_span, {}};
//   grpc::ByteBuffer req = EncodeSparseRequest(head, {&g, 1}, {&p, 1});
//   ... send; the reply arrives ...
//   SparseReplyInfo info;
//   PS_RETURN_IF_ERROR(ReadSparseReply(reply, pulls, row_floats,
//       [&](size_t j, size_t i) { return out[j] + pos[j][i] * dim[j]; },
//       &info));
#ifndef WORKER_CLIENT_SPARSE_WIRE_H_
#define WORKER_CLIENT_SPARSE_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "grpcpp/support/byte_buffer.h"

namespace ps {

// One SparseRows to send: the ids and (a push) their gradient rows.
struct SparseRowsOut {
  std::string table;
  std::vector<uint64_t> ids;
  std::vector<float> values;  // ids.size() x dim; empty in a pull
};

// One SparseRows to send, borrowed: the table name and the ids and (a push)
// their gradient rows stay where the caller keeps them.
struct SparseRowsRef {
  absl::string_view table;
  absl::Span<const uint64_t> ids;
  absl::Span<const float> values;  // ids.size() x dim; empty in a pull
};

// The scalar fields of a request.
struct SparseRequestHead {
  absl::string_view job_id;
  uint32_t worker = 0;
  uint64_t step = 0;
  uint32_t attempt = 0;
  bool push = false;
  // A step split in parts (SparseExchangeRequest.part/parts); 0 and 0: not
  // split (left off the wire, as protobuf does).
  uint32_t part = 0;
  uint32_t parts = 0;
  // SparseExchangeRequest.table_shard: the shard whose rows these are
  // (-1: unset, left off the wire).
  int64_t table_shard = -1;
  // SparseExchangeRequest.placement_epoch (0: left off the wire).
  uint64_t placement_epoch = 0;
};

// A SparseExchangeRequest, byte for byte as protobuf would write it. Its
// large ids and values slices point into the buffers `gradients` and
// `pulls` view, which must stay unchanged until gRPC is done with the
// request (a unary call's completion callback runs after that); the
// SparseRowsRef entries themselves may go once it returns.
grpc::ByteBuffer EncodeSparseRequest(const SparseRequestHead& head,
                                     absl::Span<const SparseRowsRef> gradients,
                                     absl::Span<const SparseRowsRef> pulls);
// The same over owning rows (their vectors are what the slices borrow).
grpc::ByteBuffer EncodeSparseRequest(const SparseRequestHead& head,
                                     absl::Span<const SparseRowsOut> gradients,
                                     absl::Span<const SparseRowsOut> pulls);

struct SparseReplyInfo {
  uint64_t version = 0;
  bool duplicate = false;
  bool stale = false;
  size_t bytes = 0;  // the reply's size
};

// Checks a SparseExchangeResponse against `pulls` (one rows entry each, same
// table and ids, row_floats[j] floats per row) and copies row i of entry j
// to dst(j, i). A reply that does not parse or match is kInternal naming
// the entry; nothing is copied then (every entry is checked first).
absl::Status ReadSparseReply(const grpc::ByteBuffer& reply,
                             absl::Span<const SparseRowsOut> pulls,
                             absl::Span<const size_t> row_floats,
                             const std::function<float*(size_t, size_t)>& dst,
                             SparseReplyInfo* info);

}  // namespace ps

#endif  // WORKER_CLIENT_SPARSE_WIRE_H_
