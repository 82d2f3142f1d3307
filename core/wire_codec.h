// Hand codec of proto/ps.proto's tensor messages, byte for byte as protobuf
// writes them, for the zero-copy PushPull/Pull path. The client
// (worker/client/async_ps_client.cc) and the shard service
// (server/rpc/ps_service.cc) encode the small fields into header strings and
// send each ChunkData's payload as a separate piece that borrows the tensor;
// the client decodes replies straight from gRPC's receive slices.
//
//   std::string head;
//   PutVarintField(kRequestStepTag, step, &head);
//   std::vector<WirePiece> pieces;
//   EncodeChunkList(kRequestGradientsTag, chunks, /*copy_below=*/0, &head,
//                   &pieces);
//
//   WireReader in(pieces_of_the_reply);
//   PS_RETURN_IF_ERROR(DecodeChunkList(kReplyChunksField, &in,
//                                      [&](const ChunkDataView& c) { ... }));
//
// proto3 leaves fields at their default value off the wire; so does the
// encoder, which is what makes the output byte-identical (the tests
// compare). The decoder accepts every legal encoding: fields in any order,
// unknown fields, repeated scalars (the last wins), pieces split anywhere.
// No grpc dependency: pieces are string_views the caller maps to slices.
#ifndef CORE_WIRE_CODEC_H_
#define CORE_WIRE_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ps {

// Protobuf wire types.
inline constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2,
                          kFixed32 = 5;
// A tag is field << kWireTypeBits | wire type.
inline constexpr uint32_t kWireTypeBits = 3;
inline constexpr uint32_t kWireTypeMask = (1u << kWireTypeBits) - 1;
inline constexpr size_t kFixed64Bytes = 8, kFixed32Bytes = 4;
// A varint carries 7 bits per byte, the high bit saying "more follows".
inline constexpr uint32_t kVarintPayloadBits = 7;
inline constexpr uint8_t kVarintMore = 0x80;
inline constexpr uint8_t kVarintPayloadMask = 0x7f;
inline constexpr uint32_t kMaxVarintBits = 64;

constexpr uint8_t Tag(uint32_t field, uint32_t wire_type) {
  return static_cast<uint8_t>(field << kWireTypeBits | wire_type);
}

// PushPullRequest (PushRequest has the same fields and numbers).
inline constexpr uint32_t kRequestGradientsField = 5;
inline constexpr uint8_t kRequestJobIdTag = Tag(1, kLengthDelimited);
inline constexpr uint8_t kRequestWorkerTag = Tag(2, kVarint);
inline constexpr uint8_t kRequestStepTag = Tag(3, kVarint);
inline constexpr uint8_t kRequestAttemptTag = Tag(4, kVarint);
inline constexpr uint8_t kRequestGradientsTag =
    Tag(kRequestGradientsField, kLengthDelimited);
// PushPullResponse (PullResponse: field 1 only).
inline constexpr uint32_t kReplyChunksField = 1;
inline constexpr uint8_t kReplyChunksTag =
    Tag(kReplyChunksField, kLengthDelimited);
inline constexpr uint8_t kReplyDuplicatesTag = Tag(2, kVarint);
inline constexpr uint8_t kReplyStaleTag = Tag(3, kVarint);
// ChunkData.
inline constexpr uint32_t kChunkIdField = 1, kChunkVersionField = 2,
                          kChunkDataField = 3, kChunkFormatField = 4,
                          kChunkIndicesField = 5, kChunkBaseVersionField = 6;
inline constexpr uint8_t kChunkIdTag = Tag(kChunkIdField, kVarint);
inline constexpr uint8_t kChunkVersionTag = Tag(kChunkVersionField, kVarint);
inline constexpr uint8_t kChunkDataTag = Tag(kChunkDataField, kLengthDelimited);
inline constexpr uint8_t kChunkFormatTag = Tag(kChunkFormatField, kVarint);
inline constexpr uint8_t kChunkIndicesTag =
    Tag(kChunkIndicesField, kLengthDelimited);
inline constexpr uint8_t kChunkBaseVersionTag =
    Tag(kChunkBaseVersionField, kVarint);
// HeldChunk, as element `held` (field 6) of PushPullRequest / PullRequest.
inline constexpr uint8_t kRequestHeldTag = Tag(6, kLengthDelimited);
inline constexpr uint8_t kHeldChunkIdTag = Tag(1, kVarint);
inline constexpr uint8_t kHeldVersionTag = Tag(2, kVarint);

// ---------------------------------------------------------------- encoder

size_t VarintSize(uint64_t v);
void PutVarint(uint64_t v, std::string* out);
// A varint field, left off when `v` is 0.
void PutVarintField(uint8_t tag, uint64_t v, std::string* out);
// A bytes/string field, left off when empty.
void PutBytesField(uint8_t tag, absl::string_view v, std::string* out);

// A ChunkData as element `list_tag` of the enclosing message, up to the
// first of its `data_bytes` payload bytes (which the caller sends next);
// with data_bytes == 0 the element is complete up to its tail (empty bytes
// stay off). `tail_bytes`: the size of what PutChunkDataTail writes after
// the payload (0 for a dense FP32 chunk).
void PutChunkDataHead(uint8_t list_tag, uint64_t chunk_id, uint64_t version,
                      size_t data_bytes, std::string* out,
                      size_t tail_bytes = 0);
// The fields after the payload: ChunkData.format and .indices (each left
// off when 0 / empty) and .base_version (written when given, 0 included:
// the field has presence), and their encoded size.
void PutChunkDataTail(uint64_t format, absl::string_view indices,
                      std::string* out,
                      std::optional<uint64_t> base_version = std::nullopt);
size_t ChunkDataTailSize(uint64_t format, absl::string_view indices,
                         std::optional<uint64_t> base_version = std::nullopt);

// A HeldChunk {chunk_id, version} as element `held` of a request.
void PutHeldChunk(uint64_t chunk_id, uint64_t version, std::string* out);

// One ChunkData to encode; `data` and `indices` are borrowed.
struct ChunkDataRef {
  uint64_t chunk_id = 0;
  uint64_t version = 0;
  absl::string_view data;
  uint64_t format = 0;        // WireFormat; 0 (FP32) stays off the wire
  absl::string_view indices;  // sparse offsets; copied into the head
  std::optional<uint64_t> base_version;  // set: a delta reply
};

// A piece of an encoded message: either bytes the encoder wrote (`owned`)
// or a payload it points to (`borrowed`, when `is_borrowed`).
struct WirePiece {
  std::string owned;
  absl::string_view borrowed;
  bool is_borrowed = false;
};

// Appends `chunks` as elements `list_tag` of a message: their heads go into
// `*head` (which may hold earlier fields); payloads of at least
// `copy_below` bytes become borrowed pieces (each after the head written so
// far, moved into an owned piece), shorter ones are copied into the head.
// What is left in `*head` afterwards is the caller's to finish and flush.
void EncodeChunkList(uint8_t list_tag, absl::Span<const ChunkDataRef> chunks,
                     size_t copy_below, std::string* head,
                     std::vector<WirePiece>* pieces);

// ---------------------------------------------------------------- decoder

// Reads a message spread over pieces, front to back, with marks to come
// back to a position (a ChunkData's payload is copied once its chunk_id,
// which may follow it on the wire, is known). Borrows the pieces.
class WireReader {
 public:
  struct Mark {
    size_t piece = 0, offset = 0, position = 0;
  };

  explicit WireReader(absl::Span<const absl::string_view> pieces);

  size_t position() const { return at_.position; }
  bool done() const { return at_.piece == pieces_.size(); }
  Mark mark() const { return at_; }
  void Seek(const Mark& m) { at_ = m; }

  // False on a truncated or over-long varint.
  bool ReadVarint(uint64_t* v);
  // A field's tag as protobuf reads one: at most 5 bytes, taken modulo
  // 2^32 (a fifth byte's higher bits are dropped), field number > 0; false
  // otherwise.
  bool ReadTag(uint64_t* tag);
  // A length prefix as protobuf reads one: at most 5 bytes, below 2^31.
  bool ReadLength(uint64_t* n);
  // Copies (dst != nullptr) or skips the next n bytes; false if truncated.
  bool Read(char* dst, size_t n);
  // The n bytes from `at` as views of the pieces they lie in (appended to
  // `out`); they must exist (a view's payload, checked while decoding).
  void Views(const Mark& at, size_t n,
             std::vector<absl::string_view>* out) const;
  // Skips a field of `wire_type` whose tag was just read; false for groups
  // (not in proto3: refused, where protobuf would keep them as unknown
  // fields), an invalid wire type and truncation.
  bool SkipField(uint32_t wire_type);

 private:
  void Advance(size_t n);
  void Normalize();  // keeps `at_` on a byte that exists (or at the end)

  absl::Span<const absl::string_view> pieces_;
  Mark at_;
};

// One ChunkData as decoded; its payload stays in the reader's pieces.
struct ChunkDataView {
  uint64_t chunk_id = 0;
  uint64_t version = 0;
  size_t data_bytes = 0;
  WireReader::Mark data;  // start of the payload (if data_bytes > 0)
  uint64_t format = 0;    // WireFormat (unchecked)
  size_t indices_bytes = 0;
  WireReader::Mark indices;       // start of the offsets (if indices_bytes > 0)
  bool has_base_version = false;  // a delta on top of `base_version`
  uint64_t base_version = 0;
};

// Copies a view's payload (view.data_bytes bytes) into `dst`.
void CopyChunkData(const ChunkDataView& view, WireReader* in, char* dst);
// Copies a view's offsets (view.indices_bytes bytes) into `dst`.
void CopyChunkIndices(const ChunkDataView& view, WireReader* in, char* dst);

// Reads one ChunkData of `length` bytes whose tag and length were just
// read from `in`. kDataLoss as DecodeChunkList says.
absl::Status DecodeChunkData(uint64_t length, WireReader* in,
                             ChunkDataView* view);

// Reads the whole message in `in`: each element of the repeated ChunkData
// field `list_field` goes to `visit` in wire order (a non-OK return stops
// the decoding and is returned); other fields are skipped. Malformed or
// truncated input is kDataLoss naming what broke and its byte offset.
absl::Status DecodeChunkList(
    uint32_t list_field, WireReader* in,
    const std::function<absl::Status(const ChunkDataView&)>& visit);

}  // namespace ps

#endif  // CORE_WIRE_CODEC_H_
