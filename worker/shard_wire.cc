#include "worker/shard_wire.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "core/wire_codec.h"
#include "core/wire_format.h"
#include "proto/ps.pb.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "tensor payloads are little-endian float32");

namespace ps {

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
                            const RequestGroup& group) {
  PullRequest r;
  r.set_job_id(std::string(head.job_id));
  r.set_worker(head.worker);
  r.set_step(head.step);
  r.set_min_version(head.min_version);
  for (size_t i : group.chunks) r.add_chunk_ids(plan.chunks()[i].id);
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
                            absl::Span<const PushPayload> payloads) {
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
      refs.push_back({c.id, versions[c.id], p.data,
                      static_cast<uint64_t>(p.format), p.indices});
      continue;
    }
    refs.push_back({c.id,
                    versions[c.id],
                    absl::string_view(
                        reinterpret_cast<const char*>(gradient + c.flat_offset),
                        c.length * sizeof(float)),
                    0,
                    {}});
  }
  std::vector<WirePiece> pieces;
  EncodeChunkList(kRequestGradientsTag, refs, /*copy_below=*/0, &fields,
                  &pieces);
  std::vector<grpc::Slice> slices;
  slices.reserve(pieces.size() + 1);
  *borrowed = 0;
  for (WirePiece& p : pieces) {
    if (!p.is_borrowed) {
      slices.emplace_back(p.owned);
      continue;
    }
    // gRPC never writes through a send slice; the const_cast only fits
    // the constructor's signature.
    slices.emplace_back(const_cast<char*>(p.borrowed.data()), p.borrowed.size(),
                        release, release_arg);
    ++*borrowed;
  }
  if (!fields.empty()) slices.emplace_back(fields);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

absl::Status DecodeReply(const grpc::ByteBuffer& reply, const RequestPlan& plan,
                         const RequestGroup& group, bool has_chunks,
                         float* params, DecodedReply* out) {
  const uint32_t shard = group.shard;
  auto lost = [shard](absl::string_view what) {
    return absl::DataLossError(
        absl::StrCat("shard ", shard, " returned ", what));
  };
  std::vector<grpc::Slice> slices;
  if (reply.Valid() && !reply.Dump(&slices).ok()) {
    return lost("an unreadable reply");
  }
  std::vector<absl::string_view> pieces;
  pieces.reserve(slices.size());
  for (const grpc::Slice& s : slices) {
    pieces.emplace_back(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  const size_t expected = has_chunks ? group.chunks.size() : 0;
  size_t next = 0;  // index into the group of the next expected chunk
  bool mismatch = false;
  WireReader in(pieces);
  absl::Status s =
      DecodeChunkList(kReplyChunksField, &in, [&](const ChunkDataView& v) {
        mismatch = true;
        if (next >= expected) {
          return lost(
              absl::StrCat("more than the ", expected, " chunks asked for"));
        }
        const PlannedChunk& c = plan.chunks()[group.chunks[next]];
        if (!IsKnownWireFormat(static_cast<int>(v.format)) ||
            v.indices_bytes != 0) {
          return lost(absl::StrCat("chunk ", v.chunk_id, " in format ",
                                   WireFormatName(static_cast<int>(v.format)),
                                   v.indices_bytes != 0 ? ", sparse" : "",
                                   "; parameters come dense in FP32, BF16 "
                                   "or FP16"));
        }
        const int format = static_cast<int>(v.format);
        const size_t bytes = c.length * ElementBytes(format);
        if (v.chunk_id != c.id || v.data_bytes != bytes) {
          return lost(absl::StrCat("chunk ", v.chunk_id, " with ", v.data_bytes,
                                   " bytes; expected chunk ", c.id, " with ",
                                   bytes, " (", WireFormatName(format), ")"));
        }
        float* dst = params + c.flat_offset;
        if (ElementBytes(format) == sizeof(float)) {
          CopyChunkData(v, &in, reinterpret_cast<char*>(dst));
        } else {
          // The 16-bit values into a scratch buffer, widened from there.
          static thread_local std::string scratch;
          scratch.resize(v.data_bytes);
          CopyChunkData(v, &in, scratch.data());
          DecodePayload(format, scratch, "", absl::MakeSpan(dst, c.length));
        }
        out->versions.emplace_back(c.id, v.version);
        out->data_bytes += v.data_bytes;
        out->dense_bytes += c.length * sizeof(float);
        ++next;
        mismatch = false;
        return absl::OkStatus();
      });
  if (!s.ok()) {
    return mismatch ? s
                    : lost(absl::StrCat("a malformed reply: ", s.message()));
  }
  if (next != expected) {
    return lost(absl::StrCat(next, " chunks, asked for ", expected));
  }
  return absl::OkStatus();
}

}  // namespace ps
