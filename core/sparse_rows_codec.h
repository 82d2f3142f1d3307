// Hand encoding of proto/ps.proto's SparseRows, byte for byte as protobuf
// writes it, for the raw SparseExchange path: the shard's reply
// (server/rpc/ps_service.cc) sends each element's ids and values as pieces
// borrowed from the request's ids and the rows it pulled, instead of
// copying them into a message and serializing it. Decoding is
// server/rpc/sparse_decoder.h (requests) and DecodeSparseReply below
// (replies, read in place by the worker's clients).
//
//   std::string head;
//   std::vector<WirePiece> pieces;
//   EncodeSparseRows(kSparseReplyRowsTag, "emb", ids, values,
//                    /*copy_below=*/4096, &head, &pieces);
//   PutVarintField(kSparseReplyVersionTag, version, &head);
//   // send pieces, then head
#ifndef CORE_SPARSE_ROWS_CODEC_H_
#define CORE_SPARSE_ROWS_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/wire_codec.h"

namespace ps {

// ParameterServer's SparseExchange, as a raw (generic) call names it.
inline constexpr char kSparseExchangeRpc[] =
    "/ps.ParameterServer/SparseExchange";
// SparseExchangeRequest.
inline constexpr uint8_t kSparseRequestJobIdTag = Tag(1, kLengthDelimited);
inline constexpr uint8_t kSparseRequestWorkerTag = Tag(2, kVarint);
inline constexpr uint8_t kSparseRequestStepTag = Tag(3, kVarint);
inline constexpr uint8_t kSparseRequestAttemptTag = Tag(4, kVarint);
inline constexpr uint8_t kSparseRequestPushTag = Tag(5, kVarint);
inline constexpr uint8_t kSparseRequestGradientsTag = Tag(6, kLengthDelimited);
inline constexpr uint8_t kSparseRequestPullTag = Tag(7, kLengthDelimited);
inline constexpr uint8_t kSparseRequestPartTag = Tag(8, kVarint);
inline constexpr uint8_t kSparseRequestPartsTag = Tag(9, kVarint);
// SparseExchangeRequest.table_shard (optional: written even when 0).
inline constexpr uint8_t kSparseRequestTableShardTag = Tag(10, kVarint);
inline constexpr uint8_t kSparseRequestPlacementEpochTag = Tag(11, kVarint);
// The most parts one split SparseExchange may have (its `parts` field):
// with the 4 MiB default message, a 4 GiB step to one shard.
inline constexpr uint32_t kMaxSparseExchangeParts = 1024;
// SparseExchangeResponse.
inline constexpr uint8_t kSparseReplyRowsTag = Tag(1, kLengthDelimited);
inline constexpr uint8_t kSparseReplyVersionTag = Tag(2, kVarint);
inline constexpr uint8_t kSparseReplyDuplicateTag = Tag(3, kVarint);
inline constexpr uint8_t kSparseReplyStaleTag = Tag(4, kVarint);
// SparseRows.
inline constexpr uint8_t kSparseRowsTableTag = Tag(1, kLengthDelimited);
inline constexpr uint8_t kSparseRowsIdsTag = Tag(2, kLengthDelimited);
inline constexpr uint8_t kSparseRowsValuesTag = Tag(3, kLengthDelimited);

// Appends a SparseRows {table, ids, values} as element `list_tag` of a
// message: the small fields go into `*head` (which may hold earlier
// fields); `ids` and `values` of at least `copy_below` bytes become
// borrowed pieces (each after the head written so far, moved into an owned
// piece), shorter ones are copied into the head. Empty fields stay off the
// wire, as protobuf leaves them. What is left in `*head` is the caller's to
// finish and flush.
void EncodeSparseRows(uint8_t list_tag, absl::string_view table,
                      absl::string_view ids, absl::string_view values,
                      size_t copy_below, std::string* head,
                      std::vector<WirePiece>* pieces);

// One SparseRows of a decoded reply: its ids and values stay in the
// reader's pieces (the last occurrence of each field, as protobuf keeps).
struct SparseRowsView {
  std::string table;
  size_t ids_bytes = 0;
  WireReader::Mark ids;
  size_t values_bytes = 0;
  WireReader::Mark values;
};
struct SparseReplyView {
  std::vector<SparseRowsView> rows;
  uint64_t version = 0;
  bool duplicate = false;
  bool stale = false;
};

// Reads a whole SparseExchangeResponse from `in` (its fields in any order,
// unknown ones skipped). Malformed or truncated input is kDataLoss naming
// what broke and its byte offset.
absl::Status DecodeSparseReply(WireReader* in, SparseReplyView* out);

// Compares the `n` bytes at `at` with `want` (n == want.size()), in place.
bool BytesEqual(const WireReader& in, const WireReader::Mark& at,
                absl::string_view want);

}  // namespace ps

#endif  // CORE_SPARSE_ROWS_CODEC_H_
