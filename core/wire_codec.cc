#include "core/wire_codec.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ps {

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= kVarintMore) {
    v >>= kVarintPayloadBits;
    ++n;
  }
  return n;
}

void PutVarint(uint64_t v, std::string* out) {
  while (v >= kVarintMore) {
    out->push_back(static_cast<char>(v | kVarintMore));
    v >>= kVarintPayloadBits;
  }
  out->push_back(static_cast<char>(v));
}

void PutVarintField(uint8_t tag, uint64_t v, std::string* out) {
  if (v == 0) return;
  out->push_back(static_cast<char>(tag));
  PutVarint(v, out);
}

void PutBytesField(uint8_t tag, absl::string_view v, std::string* out) {
  if (v.empty()) return;
  out->push_back(static_cast<char>(tag));
  PutVarint(v.size(), out);
  out->append(v.data(), v.size());
}

void PutChunkDataHead(uint8_t list_tag, uint64_t chunk_id, uint64_t version,
                      size_t data_bytes, std::string* out, size_t tail_bytes) {
  std::string fields;
  PutVarintField(kChunkIdTag, chunk_id, &fields);
  PutVarintField(kChunkVersionTag, version, &fields);
  const size_t data_field =
      data_bytes == 0 ? 0 : 1 + VarintSize(data_bytes) + data_bytes;
  out->push_back(static_cast<char>(list_tag));
  PutVarint(fields.size() + data_field + tail_bytes, out);
  *out += fields;
  if (data_bytes == 0) return;
  out->push_back(static_cast<char>(kChunkDataTag));
  PutVarint(data_bytes, out);
}

void PutChunkDataTail(uint64_t format, absl::string_view indices,
                      std::string* out, std::optional<uint64_t> base_version) {
  PutVarintField(kChunkFormatTag, format, out);
  PutBytesField(kChunkIndicesTag, indices, out);
  if (base_version.has_value()) {
    out->push_back(static_cast<char>(kChunkBaseVersionTag));
    PutVarint(*base_version, out);
  }
}

size_t ChunkDataTailSize(uint64_t format, absl::string_view indices,
                         std::optional<uint64_t> base_version) {
  size_t n = format == 0 ? 0 : 1 + VarintSize(format);
  if (!indices.empty()) n += 1 + VarintSize(indices.size()) + indices.size();
  if (base_version.has_value()) n += 1 + VarintSize(*base_version);
  return n;
}

void PutHeldChunk(uint64_t chunk_id, uint64_t version, std::string* out) {
  std::string fields;
  PutVarintField(kHeldChunkIdTag, chunk_id, &fields);
  PutVarintField(kHeldVersionTag, version, &fields);
  out->push_back(static_cast<char>(kRequestHeldTag));
  PutVarint(fields.size(), out);
  *out += fields;
}

void EncodeChunkList(uint8_t list_tag, absl::Span<const ChunkDataRef> chunks,
                     size_t copy_below, std::string* head,
                     std::vector<WirePiece>* pieces) {
  for (const ChunkDataRef& c : chunks) {
    PutChunkDataHead(list_tag, c.chunk_id, c.version, c.data.size(), head,
                     ChunkDataTailSize(c.format, c.indices, c.base_version));
    // proto3 leaves empty bytes off the wire.
    if (!c.data.empty() && c.data.size() < copy_below) {
      head->append(c.data.data(), c.data.size());
    } else if (!c.data.empty()) {
      pieces->push_back(WirePiece{std::move(*head), {}, false});
      head->clear();
      pieces->push_back(WirePiece{{}, c.data, true});
    }
    PutChunkDataTail(c.format, c.indices, head, c.base_version);
  }
}

WireReader::WireReader(absl::Span<const absl::string_view> pieces)
    : pieces_(pieces) {
  Normalize();
}

bool WireReader::ReadVarint(uint64_t* v) {
  *v = 0;
  for (uint32_t shift = 0; shift < kMaxVarintBits;
       shift += kVarintPayloadBits) {
    if (done()) return false;
    const uint8_t b = static_cast<uint8_t>(pieces_[at_.piece][at_.offset]);
    Advance(1);
    *v |= static_cast<uint64_t>(b & kVarintPayloadMask) << shift;
    if ((b & kVarintMore) == 0) return true;
  }
  return false;
}

namespace {

// Protobuf's limits for tags and length prefixes (varint32 / size).
constexpr size_t kMaxVarint32Bytes = 5;
constexpr uint64_t kMaxTag = 0xffffffffu;
constexpr uint64_t kMaxLength = 0x7fffffffu;

}  // namespace

bool WireReader::ReadTag(uint64_t* tag) {
  const size_t start = position();
  if (!ReadVarint(tag) || position() - start > kMaxVarint32Bytes) {
    return false;
  }
  // As protobuf reads a tag (ReadTagFallback, in 32-bit arithmetic): the
  // bits a fifth byte carries beyond 32 are dropped, not refused.
  *tag &= kMaxTag;
  return (*tag >> kWireTypeBits) != 0;
}

bool WireReader::ReadLength(uint64_t* n) {
  const size_t start = position();
  return ReadVarint(n) && position() - start <= kMaxVarint32Bytes &&
         *n <= kMaxLength;
}

bool WireReader::Read(char* dst, size_t n) {
  while (n > 0) {
    if (done()) return false;
    const absl::string_view s = pieces_[at_.piece];
    const size_t k = std::min(n, s.size() - at_.offset);
    if (dst != nullptr) {
      std::memcpy(dst, s.data() + at_.offset, k);
      dst += k;
    }
    Advance(k);
    n -= k;
  }
  return true;
}

bool WireReader::SkipField(uint32_t wire_type) {
  uint64_t n = 0;
  switch (wire_type) {
    case kVarint:
      return ReadVarint(&n);
    case kFixed64:
      return Read(nullptr, kFixed64Bytes);
    case kLengthDelimited:
      return ReadLength(&n) && Read(nullptr, n);
    case kFixed32:
      return Read(nullptr, kFixed32Bytes);
    default:  // groups are not in proto3 messages
      return false;
  }
}

void WireReader::Advance(size_t n) {
  at_.offset += n;
  at_.position += n;
  Normalize();
}

void WireReader::Normalize() {
  while (at_.piece < pieces_.size() &&
         at_.offset == pieces_[at_.piece].size()) {
    ++at_.piece;
    at_.offset = 0;
  }
}

void WireReader::Views(const Mark& at, size_t n,
                       std::vector<absl::string_view>* out) const {
  size_t piece = at.piece, offset = at.offset;
  while (n > 0 && piece < pieces_.size()) {
    const size_t take = std::min(n, pieces_[piece].size() - offset);
    if (take > 0) out->push_back(pieces_[piece].substr(offset, take));
    n -= take;
    ++piece;
    offset = 0;
  }
}

void CopyChunkData(const ChunkDataView& view, WireReader* in, char* dst) {
  if (view.data_bytes == 0) return;
  const WireReader::Mark after = in->mark();
  in->Seek(view.data);
  in->Read(dst, view.data_bytes);  // checked while decoding
  in->Seek(after);
}

void CopyChunkIndices(const ChunkDataView& view, WireReader* in, char* dst) {
  if (view.indices_bytes == 0) return;
  const WireReader::Mark after = in->mark();
  in->Seek(view.indices);
  in->Read(dst, view.indices_bytes);  // checked while decoding
  in->Seek(after);
}

namespace {

absl::Status Malformed(absl::string_view what, const WireReader& in) {
  return absl::DataLossError(
      absl::StrCat("malformed ", what, " at byte ", in.position()));
}

}  // namespace

absl::Status DecodeChunkData(uint64_t length, WireReader* in,
                             ChunkDataView* view) {
  const size_t end = in->position() + length;
  while (in->position() < end) {
    uint64_t tag = 0, n = 0;
    if (!in->ReadTag(&tag)) return Malformed("ChunkData (tag)", *in);
    const uint64_t field = tag >> kWireTypeBits;
    const uint32_t wire = static_cast<uint32_t>(tag & kWireTypeMask);
    if (field == kChunkIdField && wire == kVarint) {
      if (!in->ReadVarint(&view->chunk_id))
        return Malformed("ChunkData.chunk_id", *in);
    } else if (field == kChunkVersionField && wire == kVarint) {
      if (!in->ReadVarint(&view->version))
        return Malformed("ChunkData.version", *in);
    } else if (field == kChunkDataField && wire == kLengthDelimited) {
      if (!in->ReadLength(&n)) return Malformed("ChunkData.data", *in);
      view->data_bytes = n;
      view->data = in->mark();
      if (!in->Read(nullptr, n))
        return Malformed("ChunkData.data (truncated)", *in);
    } else if (field == kChunkFormatField && wire == kVarint) {
      if (!in->ReadVarint(&view->format))
        return Malformed("ChunkData.format", *in);
    } else if (field == kChunkIndicesField && wire == kLengthDelimited) {
      if (!in->ReadLength(&n)) return Malformed("ChunkData.indices", *in);
      view->indices_bytes = n;
      view->indices = in->mark();
      if (!in->Read(nullptr, n))
        return Malformed("ChunkData.indices (truncated)", *in);
    } else if (field == kChunkBaseVersionField && wire == kVarint) {
      if (!in->ReadVarint(&view->base_version))
        return Malformed("ChunkData.base_version", *in);
      view->has_base_version = true;
    } else if (!in->SkipField(wire)) {
      return Malformed("ChunkData (field)", *in);
    }
  }
  if (in->position() != end) return Malformed("ChunkData (overrun)", *in);
  return absl::OkStatus();
}

absl::Status DecodeChunkList(
    uint32_t list_field, WireReader* in,
    const std::function<absl::Status(const ChunkDataView&)>& visit) {
  while (!in->done()) {
    uint64_t tag = 0, length = 0;
    if (!in->ReadTag(&tag)) return Malformed("message (tag)", *in);
    const uint32_t wire = static_cast<uint32_t>(tag & kWireTypeMask);
    if (tag >> kWireTypeBits != list_field || wire != kLengthDelimited) {
      if (!in->SkipField(wire)) return Malformed("message (field)", *in);
      continue;
    }
    if (!in->ReadLength(&length)) return Malformed("message (length)", *in);
    ChunkDataView view;
    PS_RETURN_IF_ERROR(DecodeChunkData(length, in, &view));
    PS_RETURN_IF_ERROR(visit(view));
  }
  return absl::OkStatus();
}

}  // namespace ps
