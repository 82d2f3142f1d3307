#include "worker/client/shard_wire.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "core/wire_codec.h"
#include "core/wire_format.h"
#include "core/wire_slices.h"
#include "proto/ps.pb.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "tensor payloads are little-endian float32");

namespace ps {
namespace {

// placement_epoch: PushPullRequest / PullRequest field 7, PushRequest 6.
constexpr uint8_t kPlacementEpochTag = Tag(7, kVarint);
constexpr uint8_t kPushPlacementEpochTag = Tag(6, kVarint);

}  // namespace

std::string Flatten(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!b.Valid() || !b.Dump(&slices).ok()) return out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

grpc::ByteBuffer EncodePull(const RequestHead& head, const RequestPlan& plan,
                            const RequestGroup& group,
                            absl::Span<const uint64_t> bases) {
  PullRequest r;
  r.set_job_id(std::string(head.job_id));
  r.set_worker(head.worker);
  r.set_step(head.step);
  r.set_min_version(head.min_version);
  for (size_t i : group.chunks) r.add_chunk_ids(plan.chunks()[i].id);
  for (size_t j = 0; j < bases.size(); ++j) {
    if (bases[j] == kNotHeld) continue;
    HeldChunk* h = r.add_held();
    h->set_chunk_id(plan.chunks()[group.chunks[j]].id);
    h->set_version(bases[j]);
  }
  r.set_placement_epoch(head.placement_epoch);  // 0: left off
  grpc::Slice slice(r.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

// Small copied slices for the fields and the ChunkData heads, each followed
// by a slice borrowing that chunk's gradient.
grpc::ByteBuffer EncodePush(const RequestHead& head, const RequestPlan& plan,
                            const RequestGroup& group,
                            absl::Span<const uint64_t> versions,
                            const float* gradient, void (*release)(void*),
                            void* release_arg, int* borrowed,
                            absl::Span<const PushPayload> payloads,
                            absl::Span<const uint64_t> bases) {
  std::string fields;
  PutBytesField(kRequestJobIdTag, head.job_id, &fields);
  PutVarintField(kRequestWorkerTag, head.worker, &fields);
  PutVarintField(kRequestStepTag, head.step, &fields);
  PutVarintField(kRequestAttemptTag, head.attempt, &fields);
  std::vector<ChunkDataRef> refs;
  refs.reserve(group.chunks.size());
  for (size_t j = 0; j < group.chunks.size(); ++j) {
    const PlannedChunk& c = plan.chunks()[group.chunks[j]];
    if (!payloads.empty()) {
      const PushPayload& p = payloads[j];
      refs.push_back({c.id,
                      versions[c.id],
                      p.data,
                      static_cast<uint64_t>(p.format),
                      p.indices,
                      {}});
      continue;
    }
    refs.push_back({c.id,
                    versions[c.id],
                    absl::string_view(
                        reinterpret_cast<const char*>(gradient + c.flat_offset),
                        c.length * sizeof(float)),
                    0,
                    {},
                    {}});
  }
  std::vector<WirePiece> pieces;
  EncodeChunkList(kRequestGradientsTag, refs, /*copy_below=*/0, &fields,
                  &pieces);
  // The later fields after the gradients (5), in field order, where
  // protobuf writes them; each left off when 0 / empty.
  if (head.push_message == PushMessage::kPush) {
    PutVarintField(kPushPlacementEpochTag, head.placement_epoch, &fields);
  } else {
    for (size_t j = 0; j < bases.size(); ++j) {
      if (bases[j] == kNotHeld) continue;
      PutHeldChunk(plan.chunks()[group.chunks[j]].id, bases[j], &fields);
    }
    PutVarintField(kPlacementEpochTag, head.placement_epoch, &fields);
  }
  *borrowed = 0;
  return ToSendBuffer(pieces, std::move(fields), [&](absl::string_view bytes) {
    ++*borrowed;
    // gRPC never writes through a send slice; the const_cast only fits
    // the constructor's signature.
    return grpc::Slice(const_cast<char*>(bytes.data()), bytes.size(), release,
                       release_arg);
  });
}

namespace {

// A reply chunk that passed the checks, for the group's chunk `c`.
struct CheckedChunk {
  const PlannedChunk* c = nullptr;
  ChunkDataView view;
  int format = 0;
  std::string indices, data;  // a delta's, copied out while checking
};

// Writes a checked chunk into the flat `params`.
void Store(const CheckedChunk& k, WireReader* in, float* params) {
  float* dst = params + k.c->flat_offset;
  if (k.view.has_base_version) {
    for (size_t e = 0; e < k.indices.size() / sizeof(uint32_t); ++e) {
      dst[OffsetAt(k.indices, e)] = ValueAt(k.format, k.data, e);
    }
  } else if (ElementBytes(k.format) == sizeof(float)) {
    CopyChunkData(k.view, in, reinterpret_cast<char*>(dst));
  } else {
    // The 16-bit values into a scratch buffer, widened from there.
    static thread_local std::string scratch;
    scratch.resize(k.view.data_bytes);
    CopyChunkData(k.view, in, scratch.data());
    DecodePayload(k.format, scratch, "", absl::MakeSpan(dst, k.c->length));
  }
}

absl::Status Lost(uint32_t shard, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("shard ", shard, " returned ", what));
}

// The reply's slices as pieces for a WireReader; false if unreadable.
bool ReplyPieces(const grpc::ByteBuffer& reply,
                 std::vector<grpc::Slice>* slices,
                 std::vector<absl::string_view>* pieces) {
  if (reply.Valid() && !reply.Dump(slices).ok()) return false;
  pieces->reserve(slices->size());
  for (const grpc::Slice& s : *slices) {
    pieces->emplace_back(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return true;
}

// A delta chunk `k` (the group's chunk `next`): checks its base version
// against what this worker holds, copies its offsets and values out of the
// reply and checks them.
absl::Status CopyDelta(size_t next, absl::Span<const uint64_t> bases,
                       uint32_t shard, WireReader* in, CheckedChunk* k) {
  const ChunkDataView& v = k->view;
  const PlannedChunk& c = *k->c;
  const uint64_t held = bases.empty() ? kNotHeld : bases[next];
  const std::string field = absl::StrCat("parameters[", next, "]");
  if (v.base_version != held) {
    return Lost(
        shard,
        absl::StrCat(field, ".base_version: a delta of chunk ", c.id,
                     " on version ", v.base_version, ", but this worker ",
                     held == kNotHeld ? std::string("asked for it in full")
                                      : absl::StrCat("holds version ", held)));
  }
  k->indices.resize(v.indices_bytes);
  k->data.resize(v.data_bytes);
  CopyChunkIndices(v, in, k->indices.data());
  CopyChunkData(v, in, k->data.data());
  PayloadProblem problem;
  // Offsets as a sparse payload's; none at all: nothing changed.
  if (!k->indices.empty() || !k->data.empty()) {
    if (absl::Status st = CheckPayload(k->format, k->data, k->indices, c.length,
                                       field, &problem);
        !st.ok()) {
      return Lost(shard, absl::StrCat("a bad delta: ", st.message()));
    }
  }
  return absl::OkStatus();
}

// Checks reply chunk `v` against the group's chunk `next` (`c`): its
// format, id and size; a delta also as CopyDelta does. Fills `k`.
absl::Status CheckChunk(const ChunkDataView& v, const PlannedChunk& c,
                        size_t next, absl::Span<const uint64_t> bases,
                        uint32_t shard, WireReader* in, CheckedChunk* k) {
  k->c = &c;
  k->view = v;
  const bool delta = v.has_base_version;
  if (!IsKnownWireFormat(static_cast<int>(v.format)) ||
      (v.indices_bytes != 0 && !delta)) {
    return Lost(shard, absl::StrCat("chunk ", v.chunk_id, " in format ",
                                    WireFormatName(static_cast<int>(v.format)),
                                    v.indices_bytes != 0 ? ", sparse" : "",
                                    "; parameters come dense in FP32, BF16 "
                                    "or FP16, or as a delta"));
  }
  k->format = static_cast<int>(v.format);
  const size_t bytes = c.length * ElementBytes(k->format);
  if (v.chunk_id != c.id || (!delta && v.data_bytes != bytes)) {
    return Lost(shard,
                absl::StrCat("chunk ", v.chunk_id, " with ", v.data_bytes,
                             " bytes; expected chunk ", c.id, " with ", bytes,
                             " (", WireFormatName(k->format), ")"));
  }
  return delta ? CopyDelta(next, bases, shard, in, k) : absl::OkStatus();
}

}  // namespace

absl::Status DecodeReply(const grpc::ByteBuffer& reply, const RequestPlan& plan,
                         const RequestGroup& group, bool has_chunks,
                         float* params, DecodedReply* out,
                         absl::Span<const uint64_t> bases) {
  const uint32_t shard = group.shard;
  std::vector<grpc::Slice> slices;
  std::vector<absl::string_view> pieces;
  if (!ReplyPieces(reply, &slices, &pieces)) {
    return Lost(shard, "an unreadable reply");
  }
  const size_t expected = has_chunks ? group.chunks.size() : 0;
  std::vector<CheckedChunk> checked;
  checked.reserve(expected);
  bool mismatch = false;
  WireReader in(pieces);
  // Every chunk is checked before any is written.
  absl::Status s =
      DecodeChunkList(kReplyChunksField, &in, [&](const ChunkDataView& v) {
        mismatch = true;
        const size_t next = checked.size();
        if (next >= expected) {
          return Lost(shard, absl::StrCat("more than the ", expected,
                                          " chunks asked for"));
        }
        CheckedChunk k;
        const PlannedChunk& c = plan.chunks()[group.chunks[next]];
        PS_RETURN_IF_ERROR(CheckChunk(v, c, next, bases, shard, &in, &k));
        out->versions.emplace_back(c.id, v.version);
        out->data_bytes += v.data_bytes + v.indices_bytes;
        out->dense_bytes += c.length * sizeof(float);
        out->deltas += v.has_base_version;
        checked.push_back(std::move(k));
        mismatch = false;
        return absl::OkStatus();
      });
  if (!s.ok()) {
    return mismatch
               ? s
               : Lost(shard, absl::StrCat("a malformed reply: ", s.message()));
  }
  if (checked.size() != expected) {
    return Lost(shard,
                absl::StrCat(checked.size(), " chunks, asked for ", expected));
  }
  for (const CheckedChunk& k : checked) Store(k, &in, params);
  return absl::OkStatus();
}

}  // namespace ps
