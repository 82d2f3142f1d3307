// Hand encoding of proto/ps.proto's SparseRows, byte for byte as protobuf
// writes it, for the raw SparseExchange path: the shard's reply
// (server/rpc/ps_service.cc) sends each element's ids and values as pieces
// borrowed from the request's ids and the rows it pulled, instead of
// copying them into a message and serializing it. Decoding is
// server/rpc/sparse_decoder.h (requests).
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

#include "absl/strings/string_view.h"
#include "core/wire_codec.h"

namespace ps {

// SparseExchangeRequest.
inline constexpr uint8_t kSparseRequestGradientsTag = Tag(6, kLengthDelimited);
inline constexpr uint8_t kSparseRequestPullTag = Tag(7, kLengthDelimited);
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

}  // namespace ps

#endif  // CORE_SPARSE_ROWS_CODEC_H_
