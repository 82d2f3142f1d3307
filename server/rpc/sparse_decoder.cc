#include "server/rpc/sparse_decoder.h"

#include <cstdint>
#include <string>
#include <vector>

#include "common/status_macros.h"
#include "core/wire_codec.h"
#include "server/rpc/request_fields.h"

namespace ps {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "ids and values travel as little-endian bytes, copied as is");

// SparseExchangeRequest's and SparseRows' fields (proto/ps.proto).
constexpr uint32_t kJobIdField = 1, kWorkerField = 2, kStepField = 3,
                   kAttemptField = 4, kPushField = 5, kGradientsField = 6,
                   kPullField = 7, kPartField = 8, kPartsField = 9,
                   kTableShardField = 10, kPlacementEpochField = 11;
constexpr uint32_t kTableField = 1, kIdsField = 2, kValuesField = 3;

constexpr RequestFields kRequest("SparseExchangeRequest");

// A bytes field of `n` bytes (which exist) as whole T's, copied once into
// `out`; the bytes past the last whole T are skipped.
template <typename T>
void ReadWhole(WireReader* in, size_t n, std::vector<T>* out) {
  out->resize(n / sizeof(T));
  in->Read(reinterpret_cast<char*>(out->data()), out->size() * sizeof(T));
  in->Read(nullptr, n % sizeof(T));
}

// One SparseRows of `length` bytes (which exist).
absl::Status DecodeRows(uint64_t length, WireReader* in, SparseRowsIn* rows) {
  const size_t end = in->position() + length;
  while (in->position() < end) {
    uint64_t tag = 0, n = 0;
    if (!in->ReadTag(&tag)) return kRequest.Malformed("rows (tag)", *in);
    const uint64_t field = tag >> kWireTypeBits;
    const uint32_t wire = static_cast<uint32_t>(tag & kWireTypeMask);
    if (wire != kLengthDelimited ||
        (field != kTableField && field != kIdsField && field != kValuesField)) {
      if (!in->SkipField(wire)) return kRequest.Malformed("rows (field)", *in);
      continue;
    }
    PS_RETURN_IF_ERROR(kRequest.ReadBoundedLength(in, end, "rows", &n));
    if (field == kTableField) {
      PS_RETURN_IF_ERROR(
          kRequest.ReadString(in, n, "rows.table", &rows->table));
    } else if (field == kIdsField) {
      rows->ids_bytes = n;
      ReadWhole(in, n, &rows->ids);
    } else {
      rows->values_bytes = n;
      ReadWhole(in, n, &rows->values);
    }
  }
  if (in->position() != end) return kRequest.Malformed("rows (overrun)", *in);
  return absl::OkStatus();
}

// A varint field of the request.
absl::Status DecodeScalar(uint64_t field, WireReader* in,
                          SparseRequestIn* req) {
  uint64_t v = 0;
  if (!in->ReadVarint(&v)) return kRequest.Malformed("varint", *in);
  // Truncated to the field's width, as protobuf does.
  if (field == kWorkerField) req->worker = static_cast<uint32_t>(v);
  if (field == kStepField) req->step = v;
  if (field == kAttemptField) req->attempt = static_cast<uint32_t>(v);
  if (field == kPushField) req->push = v != 0;
  if (field == kPartField) req->part = static_cast<uint32_t>(v);
  if (field == kPartsField) req->parts = static_cast<uint32_t>(v);
  if (field == kTableShardField) {
    req->table_shard = static_cast<int64_t>(static_cast<uint32_t>(v));
  }
  if (field == kPlacementEpochField) req->placement_epoch = v;
  return absl::OkStatus();
}

// A length-delimited field of the request.
absl::Status DecodeNested(uint64_t field, size_t total, WireReader* in,
                          SparseRequestIn* req) {
  uint64_t n = 0;
  PS_RETURN_IF_ERROR(kRequest.ReadBoundedLength(in, total, "field", &n));
  if (field == kJobIdField)
    return kRequest.ReadString(in, n, "job_id", &req->job_id);
  std::vector<SparseRowsIn>& list =
      field == kGradientsField ? req->gradients : req->pull;
  return DecodeRows(n, in, &list.emplace_back());
}

}  // namespace

absl::Status DecodeSparseExchangeRequest(
    absl::Span<const absl::string_view> pieces, SparseRequestIn* req) {
  *req = SparseRequestIn();
  size_t total = 0;
  for (absl::string_view p : pieces) total += p.size();
  WireReader in(pieces);
  while (!in.done()) {
    uint64_t tag = 0;
    if (!in.ReadTag(&tag)) return kRequest.Malformed("tag", in);
    const uint64_t field = tag >> kWireTypeBits;
    const uint32_t wire = static_cast<uint32_t>(tag & kWireTypeMask);
    if (wire == kVarint &&
        ((field >= kWorkerField && field <= kPushField) ||
         field == kPartField || field == kPartsField ||
         field == kTableShardField || field == kPlacementEpochField)) {
      PS_RETURN_IF_ERROR(DecodeScalar(field, &in, req));
    } else if (wire == kLengthDelimited &&
               (field == kJobIdField || field == kGradientsField ||
                field == kPullField)) {
      PS_RETURN_IF_ERROR(DecodeNested(field, total, &in, req));
    } else if (!in.SkipField(wire)) {
      return kRequest.Malformed("field", in);
    }
  }
  return absl::OkStatus();
}

}  // namespace ps
