#include "worker/client/sparse_wire.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/float_bytes.h"
#include "core/sparse_rows_codec.h"
#include "core/wire_codec.h"
#include "core/wire_slices.h"
#include "grpcpp/support/slice.h"

namespace ps {
namespace {

// Fields shorter than this are copied into the head: a borrowed slice
// costs more than copying a few KiB.
constexpr size_t kCopyBelowBytes = 4096;

std::vector<SparseRowsRef> RefsOf(absl::Span<const SparseRowsOut> rows) {
  std::vector<SparseRowsRef> refs;
  refs.reserve(rows.size());
  for (const SparseRowsOut& r : rows) {
    refs.push_back({r.table, r.ids, r.values});
  }
  return refs;
}

}  // namespace

grpc::ByteBuffer EncodeSparseRequest(const SparseRequestHead& head,
                                     absl::Span<const SparseRowsOut> gradients,
                                     absl::Span<const SparseRowsOut> pulls) {
  return EncodeSparseRequest(head, RefsOf(gradients), RefsOf(pulls));
}

grpc::ByteBuffer EncodeSparseRequest(const SparseRequestHead& head,
                                     absl::Span<const SparseRowsRef> gradients,
                                     absl::Span<const SparseRowsRef> pulls) {
  std::string h;
  std::vector<WirePiece> pieces;
  PutBytesField(kSparseRequestJobIdTag, head.job_id, &h);
  PutVarintField(kSparseRequestWorkerTag, head.worker, &h);
  PutVarintField(kSparseRequestStepTag, head.step, &h);
  PutVarintField(kSparseRequestAttemptTag, head.attempt, &h);
  PutVarintField(kSparseRequestPushTag, head.push ? 1 : 0, &h);
  for (const SparseRowsRef& r : gradients) {
    EncodeSparseRows(kSparseRequestGradientsTag, r.table, BytesOf(r.ids),
                     BytesOf(r.values), kCopyBelowBytes, &h, &pieces);
  }
  for (const SparseRowsRef& r : pulls) {
    EncodeSparseRows(kSparseRequestPullTag, r.table, BytesOf(r.ids), {},
                     kCopyBelowBytes, &h, &pieces);
  }
  // After the repeated fields, in field order, as protobuf writes them.
  PutVarintField(kSparseRequestPartTag, head.part, &h);
  PutVarintField(kSparseRequestPartsTag, head.parts, &h);
  if (head.table_shard >= 0) {
    h.push_back(static_cast<char>(kSparseRequestTableShardTag));
    PutVarint(static_cast<uint64_t>(head.table_shard), &h);
  }
  PutVarintField(kSparseRequestPlacementEpochTag, head.placement_epoch, &h);
  // Borrowed pieces are not copied, not freed: the caller keeps the buffers
  // (see the header).
  return ToSendBuffer(pieces, std::move(h), StaticSlice);
}

absl::Status ReadSparseReply(const grpc::ByteBuffer& reply,
                             absl::Span<const SparseRowsOut> pulls,
                             absl::Span<const size_t> row_floats,
                             const std::function<float*(size_t, size_t)>& dst,
                             SparseReplyInfo* info) {
  std::vector<grpc::Slice> slices;
  if (reply.Valid() && !reply.Dump(&slices).ok()) {
    return absl::InternalError("unreadable reply");
  }
  std::vector<absl::string_view> pieces;
  pieces.reserve(slices.size());
  for (const grpc::Slice& s : slices) {
    pieces.emplace_back(reinterpret_cast<const char*>(s.begin()), s.size());
    info->bytes += s.size();
  }
  WireReader in(pieces);
  SparseReplyView view;
  if (absl::Status s = DecodeSparseReply(&in, &view); !s.ok()) {
    return absl::InternalError(s.message());
  }
  if (view.rows.size() != pulls.size()) {
    return absl::InternalError(absl::StrCat("reply has ", view.rows.size(),
                                            " rows entries for ", pulls.size(),
                                            " pulled"));
  }
  for (size_t j = 0; j < pulls.size(); ++j) {
    const SparseRowsView& r = view.rows[j];
    const size_t want = pulls[j].ids.size() * row_floats[j] * sizeof(float);
    if (r.table != pulls[j].table || r.ids_bytes != pulls[j].ids.size() * 8 ||
        !BytesEqual(in, r.ids, BytesOf(pulls[j].ids)) ||
        r.values_bytes != want) {
      return absl::InternalError(absl::StrCat(
          "reply rows[", j, "] (table \"", r.table, "\", ", r.ids_bytes,
          " id bytes, ", r.values_bytes,
          " value bytes) does not answer pull of ", pulls[j].ids.size(),
          " ids of \"", pulls[j].table, "\""));
    }
  }
  for (size_t j = 0; j < pulls.size(); ++j) {
    in.Seek(view.rows[j].values);
    const size_t row_bytes = row_floats[j] * sizeof(float);
    for (size_t i = 0; i < pulls[j].ids.size(); ++i) {
      in.Read(reinterpret_cast<char*>(dst(j, i)), row_bytes);
    }
  }
  info->version = view.version;
  info->duplicate = view.duplicate;
  info->stale = view.stale;
  return absl::OkStatus();
}

}  // namespace ps
