#include "server/rpc/push_decoder.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "core/wire_codec.h"
#include "server/rpc/request_fields.h"

namespace ps {
namespace {

// PushPullRequest's fields (proto/ps.proto) beyond core/wire_codec.h's.
constexpr uint32_t kJobIdField = 1, kWorkerField = 2, kStepField = 3,
                   kAttemptField = 4, kHeldField = 6, kPlacementEpochField = 7;
constexpr uint32_t kHeldChunkIdField = 1, kHeldVersionField = 2;

constexpr RequestFields kRequest("PushPullRequest");

// The `n` bytes at `at` as one view: in place when they lie in one piece,
// else copied into `*owned`.
absl::string_view WholeView(const WireReader& in, const WireReader::Mark& at,
                            size_t n, std::deque<std::string>* owned) {
  if (n == 0) return {};
  std::vector<absl::string_view> views;
  in.Views(at, n, &views);
  if (views.size() == 1) return views.front();
  std::string& copy = owned->emplace_back();
  copy.reserve(n);
  for (absl::string_view v : views) copy.append(v.data(), v.size());
  return copy;
}

// The GradientIn of a decoded ChunkData.
GradientIn Gradient(const ChunkDataView& v, const WireReader& in,
                    const std::shared_ptr<const void>& keep,
                    std::deque<std::string>* owned) {
  GradientIn g;
  g.chunk_id = static_cast<uint32_t>(v.chunk_id);  // protobuf truncates too
  g.version = v.version;
  g.format = static_cast<int>(static_cast<int32_t>(v.format));
  g.indices = WholeView(in, v.indices, v.indices_bytes, owned);
  g.has_base_version = v.has_base_version;
  if (v.data_bytes == 0) return g;
  if (g.plain()) {
    in.Views(v.data, v.data_bytes, &g.data.pieces);
    g.data.keep = keep;
  } else {
    g.data.pieces.push_back(WholeView(in, v.data, v.data_bytes, owned));
  }
  return g;
}

// One HeldChunk of `length` bytes.
absl::Status DecodeHeld(uint64_t length, WireReader* in, HeldChunk* held) {
  const size_t end = in->position() + length;
  while (in->position() < end) {
    uint64_t tag = 0, v = 0;
    if (!in->ReadTag(&tag)) return kRequest.Malformed("held (tag)", *in);
    const uint64_t field = tag >> kWireTypeBits;
    const uint32_t wire = static_cast<uint32_t>(tag & kWireTypeMask);
    if (wire == kVarint &&
        (field == kHeldChunkIdField || field == kHeldVersionField)) {
      if (!in->ReadVarint(&v)) return kRequest.Malformed("held (varint)", *in);
      if (field == kHeldChunkIdField) {
        held->set_chunk_id(static_cast<uint32_t>(v));
      } else {
        held->set_version(v);
      }
    } else if (!in->SkipField(wire)) {
      return kRequest.Malformed("held (field)", *in);
    }
  }
  if (in->position() != end) return kRequest.Malformed("held (overrun)", *in);
  return absl::OkStatus();
}

// A varint field of the request.
absl::Status DecodeScalar(uint64_t field, WireReader* in,
                          PushPullRequest* header) {
  uint64_t v = 0;
  if (!in->ReadVarint(&v)) return kRequest.Malformed("varint", *in);
  if (field == kWorkerField) header->set_worker(static_cast<uint32_t>(v));
  if (field == kStepField) header->set_step(v);
  if (field == kAttemptField) header->set_attempt(static_cast<uint32_t>(v));
  if (field == kPlacementEpochField) header->set_placement_epoch(v);
  return absl::OkStatus();
}

// A length-delimited field of the request.
absl::Status DecodeNested(uint64_t field, size_t total, WireReader* in,
                          const std::shared_ptr<const void>& keep,
                          PushPullRequest* header, GradientsIn* gradients,
                          std::deque<std::string>* owned) {
  uint64_t length = 0;
  if (!in->ReadLength(&length)) return kRequest.Malformed("length", *in);
  if (field == kRequestGradientsField) {
    ChunkDataView view;
    if (absl::Status st = DecodeChunkData(length, in, &view); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "request: not a valid PushPullRequest (", st.message(), ")"));
    }
    gradients->push_back(Gradient(view, *in, keep, owned));
    return absl::OkStatus();
  }
  if (field == kHeldField) return DecodeHeld(length, in, header->add_held());
  if (length > total - in->position()) {
    return kRequest.Malformed("job_id (truncated)", *in);
  }
  return kRequest.ReadString(in, length, "job_id", header->mutable_job_id());
}

}  // namespace

absl::Status DecodePushPullRequest(absl::Span<const absl::string_view> pieces,
                                   const std::shared_ptr<const void>& keep,
                                   PushPullRequest* header,
                                   GradientsIn* gradients,
                                   std::deque<std::string>* owned) {
  header->Clear();
  gradients->clear();
  size_t total = 0;
  for (absl::string_view p : pieces) total += p.size();
  WireReader in(pieces);
  while (!in.done()) {
    uint64_t tag = 0;
    if (!in.ReadTag(&tag)) return kRequest.Malformed("tag", in);
    const uint64_t field = tag >> kWireTypeBits;
    const uint32_t wire = static_cast<uint32_t>(tag & kWireTypeMask);
    if (wire == kVarint &&
        (field == kWorkerField || field == kStepField ||
         field == kAttemptField || field == kPlacementEpochField)) {
      PS_RETURN_IF_ERROR(DecodeScalar(field, &in, header));
    } else if (wire == kLengthDelimited &&
               (field == kJobIdField || field == kRequestGradientsField ||
                field == kHeldField)) {
      PS_RETURN_IF_ERROR(
          DecodeNested(field, total, &in, keep, header, gradients, owned));
    } else if (!in.SkipField(wire)) {
      return kRequest.Malformed("field", in);
    }
  }
  return absl::OkStatus();
}

}  // namespace ps
