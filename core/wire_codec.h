// Hand-encoding of proto/ps.proto's tensor messages, byte for byte as
// protobuf writes them, for the zero-copy PushPull/Pull path: the client
// (worker/ps_client.cc) and the shard service (server/rpc/ps_service.cc)
// write the small fields into a header string and send each ChunkData's
// payload as a separate gRPC slice that borrows the tensor.
//
//   std::string head;
//   PutVarintField(kRequestStepTag, step, &head);
//   PutChunkDataHead(kRequestGradientsTag, chunk_id, version, bytes, &head);
//   // ... then `bytes` payload bytes, sent from the tensor itself
//
// proto3 leaves fields at their default value off the wire; so does this,
// which is what makes the output byte-identical (the tests compare).
#ifndef CORE_WIRE_CODEC_H_
#define CORE_WIRE_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace ps {

// Protobuf wire types.
inline constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2,
                          kFixed32 = 5;

// Tags (field << 3 | wire type).
// PushPullRequest.
inline constexpr uint8_t kRequestJobIdTag = 1 << 3 | kLengthDelimited;
inline constexpr uint8_t kRequestWorkerTag = 2 << 3 | kVarint;
inline constexpr uint8_t kRequestStepTag = 3 << 3 | kVarint;
inline constexpr uint8_t kRequestAttemptTag = 4 << 3 | kVarint;
inline constexpr uint8_t kRequestGradientsTag = 5 << 3 | kLengthDelimited;
// PushPullResponse (PullResponse: field 1 only).
inline constexpr uint32_t kReplyChunksField = 1;
inline constexpr uint8_t kReplyChunksTag =
    kReplyChunksField << 3 | kLengthDelimited;
inline constexpr uint8_t kReplyDuplicatesTag = 2 << 3 | kVarint;
inline constexpr uint8_t kReplyStaleTag = 3 << 3 | kVarint;
// ChunkData.
inline constexpr uint8_t kChunkIdTag = 1 << 3 | kVarint;
inline constexpr uint8_t kChunkVersionTag = 2 << 3 | kVarint;
inline constexpr uint8_t kChunkDataTag = 3 << 3 | kLengthDelimited;

inline size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

inline void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// A varint field, left off when `v` is 0.
inline void PutVarintField(uint8_t tag, uint64_t v, std::string* out) {
  if (v == 0) return;
  out->push_back(static_cast<char>(tag));
  PutVarint(v, out);
}

// A ChunkData as element `list_tag` of the enclosing message, up to the
// first of its `data_bytes` payload bytes (which the caller sends next);
// with data_bytes == 0 the element is complete (empty bytes stay off).
inline void PutChunkDataHead(uint8_t list_tag, uint64_t chunk_id,
                             uint64_t version, size_t data_bytes,
                             std::string* out) {
  std::string fields;
  PutVarintField(kChunkIdTag, chunk_id, &fields);
  PutVarintField(kChunkVersionTag, version, &fields);
  const size_t data_field =
      data_bytes == 0 ? 0 : 1 + VarintSize(data_bytes) + data_bytes;
  out->push_back(static_cast<char>(list_tag));
  PutVarint(fields.size() + data_field, out);
  *out += fields;
  if (data_bytes == 0) return;
  out->push_back(static_cast<char>(kChunkDataTag));
  PutVarint(data_bytes, out);
}

}  // namespace ps

#endif  // CORE_WIRE_CODEC_H_
