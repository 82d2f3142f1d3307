#include "core/sparse_rows_codec.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ps {
namespace {

// The encoded size of a bytes field of `n` bytes (0 when left off).
size_t FieldSize(size_t n) { return n == 0 ? 0 : 1 + VarintSize(n) + n; }

// A bytes field whose payload is borrowed when it is at least `copy_below`.
void PutPayload(uint8_t tag, absl::string_view v, size_t copy_below,
                std::string* head, std::vector<WirePiece>* pieces) {
  if (v.empty()) return;
  if (v.size() < copy_below) {
    PutBytesField(tag, v, head);
    return;
  }
  head->push_back(static_cast<char>(tag));
  PutVarint(v.size(), head);
  pieces->push_back(WirePiece{std::move(*head), {}, false});
  head->clear();
  pieces->push_back(WirePiece{{}, v, true});
}

absl::Status Malformed(absl::string_view what, const WireReader& in) {
  return absl::DataLossError(
      absl::StrCat("not a valid SparseExchangeResponse (", what, " at byte ",
                   in.position(), ")"));
}

// One SparseRows of `length` bytes.
absl::Status DecodeRows(uint64_t length, WireReader* in, SparseRowsView* r) {
  const size_t end = in->position() + length;
  while (in->position() < end) {
    uint64_t tag = 0, n = 0;
    if (!in->ReadTag(&tag)) return Malformed("rows (tag)", *in);
    const uint64_t field = tag >> kWireTypeBits;
    const uint32_t wire = static_cast<uint32_t>(tag & kWireTypeMask);
    if (wire != kLengthDelimited || field < 1 || field > 3) {
      if (!in->SkipField(wire)) return Malformed("rows (field)", *in);
      continue;
    }
    if (!in->ReadLength(&n)) return Malformed("rows (length)", *in);
    const WireReader::Mark at = in->mark();
    if (!in->Read(nullptr, n)) return Malformed("rows (truncated)", *in);
    if (field == 1) {  // the bytes exist: read them back
      const WireReader::Mark after = in->mark();
      in->Seek(at);
      r->table.resize(n);
      in->Read(r->table.data(), n);
      in->Seek(after);
    } else if (field == 2) {
      r->ids = at;
      r->ids_bytes = n;
    } else {
      r->values = at;
      r->values_bytes = n;
    }
  }
  if (in->position() != end) return Malformed("rows (overrun)", *in);
  return absl::OkStatus();
}

}  // namespace

absl::Status DecodeSparseReply(WireReader* in, SparseReplyView* out) {
  *out = SparseReplyView();
  while (!in->done()) {
    uint64_t tag = 0, v = 0;
    if (!in->ReadTag(&tag)) return Malformed("tag", *in);
    const uint64_t field = tag >> kWireTypeBits;
    const uint32_t wire = static_cast<uint32_t>(tag & kWireTypeMask);
    if (wire == kLengthDelimited && field == 1) {
      if (!in->ReadLength(&v)) return Malformed("rows (length)", *in);
      PS_RETURN_IF_ERROR(DecodeRows(v, in, &out->rows.emplace_back()));
    } else if (wire == kVarint && field >= 2 && field <= 4) {
      if (!in->ReadVarint(&v)) return Malformed("varint", *in);
      if (field == 2) out->version = v;
      if (field == 3) out->duplicate = v != 0;
      if (field == 4) out->stale = v != 0;
    } else if (!in->SkipField(wire)) {
      return Malformed("field", *in);
    }
  }
  return absl::OkStatus();
}

bool BytesEqual(const WireReader& in, const WireReader::Mark& at,
                absl::string_view want) {
  std::vector<absl::string_view> views;
  in.Views(at, want.size(), &views);
  size_t off = 0;
  for (absl::string_view v : views) {
    if (std::memcmp(v.data(), want.data() + off, v.size()) != 0) return false;
    off += v.size();
  }
  return off == want.size();
}

void EncodeSparseRows(uint8_t list_tag, absl::string_view table,
                      absl::string_view ids, absl::string_view values,
                      size_t copy_below, std::string* head,
                      std::vector<WirePiece>* pieces) {
  head->push_back(static_cast<char>(list_tag));
  PutVarint(FieldSize(table.size()) + FieldSize(ids.size()) +
                FieldSize(values.size()),
            head);
  PutBytesField(kSparseRowsTableTag, table, head);
  PutPayload(kSparseRowsIdsTag, ids, copy_below, head, pieces);
  PutPayload(kSparseRowsValuesTag, values, copy_below, head, pieces);
}

}  // namespace ps
