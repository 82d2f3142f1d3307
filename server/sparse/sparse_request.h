// A SparseExchange (proto/ps.proto) as the tables read and answer it, free
// of protobuf's message classes: the RPC layer decodes the request straight
// from gRPC's receive slices into this (server/rpc/sparse_decoder.h), ids
// and gradients copied once into aligned vectors that the tables then own
// (a BSP push is buffered by moving them), and encodes the reply from
// SparseReplyOut without copying its rows again (the rows are pulled into
// the buffers the reply's slices borrow). Tests and in-process callers go
// through the proto converters.
//
//   SparseRequestIn in = SparseRequestFromProto(req);
//   SparseReplyOut out;
//   tables.Exchange(&in, &out, [&](absl::Status s) {
//     if (s.ok()) SparseReplyToProto(in, out, &resp);
//   });
#ifndef SERVER_SPARSE_SPARSE_REQUEST_H_
#define SERVER_SPARSE_SPARSE_REQUEST_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "proto/ps.pb.h"

namespace ps {

// One SparseRows: `ids` and `values` hold the whole uint64s / floats of the
// received bytes; `ids_bytes` / `values_bytes` are the received lengths (the
// checks refuse a length that is not a whole number of them).
struct SparseRowsIn {
  std::string table;
  std::vector<uint64_t> ids;
  std::vector<float> values;  // ids.size() x dim in a push; none in a pull
  size_t ids_bytes = 0;
  size_t values_bytes = 0;
};

struct SparseRequestIn {
  std::string job_id;
  uint32_t worker = 0;
  uint64_t step = 0;
  uint32_t attempt = 0;
  bool push = false;
  // A step split in parts (proto/ps.proto): part `part` of `parts`; 0 of 0
  // (or of 1) is a whole step.
  uint32_t part = 0;
  uint32_t parts = 0;
  // SparseExchangeRequest.table_shard: the shard whose rows these are (-1:
  // unset, the receiving shard's).
  int64_t table_shard = -1;
  // SparseExchangeRequest.placement_epoch: the placement the rows were
  // routed by.
  uint64_t placement_epoch = 0;
  std::vector<SparseRowsIn> gradients;  // moved out once checked
  std::vector<SparseRowsIn> pull;       // values empty
};

// The answer: rows[i] are the rows of request.pull[i] (its ids, in order).
struct SparseReplyOut {
  uint64_t version = 0;
  bool duplicate = false;
  bool stale = false;
  std::vector<std::vector<float>> rows;
};

// `req` decoded the way the wire decoder does (bytes past the last whole
// id or float are counted in *_bytes, not kept).
SparseRequestIn SparseRequestFromProto(const SparseExchangeRequest& req);
// The SparseExchangeResponse of `out`, answering `in` (cleared first).
void SparseReplyToProto(const SparseRequestIn& in, const SparseReplyOut& out,
                        SparseExchangeResponse* resp);

}  // namespace ps

#endif  // SERVER_SPARSE_SPARSE_REQUEST_H_
