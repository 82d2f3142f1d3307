// The messages of one call to a shard: proto/ps.proto's PullRequest,
// PushPullRequest / PushRequest (same fields) and their replies, for the
// chunks of one RequestGroup, hand-encoded with core/wire_codec for the
// zero-copy path. No sockets: the buffers live in memory.
//
//   int borrowed = 0;
//   grpc::ByteBuffer req = EncodePush(head, plan, group, versions,
//                                     gradient.data(), &Release, arg,
//                                     &borrowed);
//   ... send; the reply arrives ...
//   DecodedReply got;
//   PS_RETURN_IF_ERROR(DecodeReply(reply, plan, group, /*has_chunks=*/true,
//                                  params.data(), &got));
#ifndef WORKER_CLIENT_SHARD_WIRE_H_
#define WORKER_CLIENT_SHARD_WIRE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/job.pb.h"
#include "worker/client/request_plan.h"

namespace ps {

// Which message EncodePush writes. They differ only in placement_epoch's
// field number (PushPullRequest 7, after `held`; PushRequest 6, no `held`).
enum class PushMessage { kPushPull, kPush };

// The scalar fields of a request.
struct RequestHead {
  absl::string_view job_id;
  uint32_t worker = 0;
  uint64_t step = 0;
  uint32_t attempt = 0;      // push
  uint64_t min_version = 0;  // pull
  // The assignment's Placement.epoch; 0 (never re-placed) stays off the
  // wire, so such requests are byte for byte what they were before epochs.
  uint64_t placement_epoch = 0;
  PushMessage push_message = PushMessage::kPushPull;  // EncodePush only
};

// The bytes of `b` in one string (an invalid buffer gives ""): for tests
// and fakes that parse a hand-encoded message with protobuf.
std::string Flatten(const grpc::ByteBuffer& b);

// Delta pulls: bases[j] is the version the worker holds of the group's
// chunk j, exactly as a reply left it (kNotHeld: none); an empty span holds
// none. The request names each held chunk (PullRequest/PushPullRequest
// `held`), and DecodeReply applies a delta only onto that version.
inline constexpr uint64_t kNotHeld = UINT64_MAX;

// A PullRequest for the group's chunks.
grpc::ByteBuffer EncodePull(const RequestHead& head, const RequestPlan& plan,
                            const RequestGroup& group,
                            absl::Span<const uint64_t> bases = {});

// One chunk's gradient as encoded for the wire (GradientEncoder); the
// strings are borrowed.
struct PushPayload {
  WireFormat format = WIRE_FORMAT_UNSPECIFIED;
  absl::string_view data;
  absl::string_view indices;
};

// A PushPullRequest (or, head.push_message kPush, a PushRequest: then
// `bases` must be empty, it has no `held`) with the group's chunks of the flat
// `gradient`, each chunk's version from `versions` (by chunk id). With
// `payloads` empty, each chunk goes dense in FP32 and its payload slice
// points into `gradient`; otherwise payloads[j] is the group's chunk j
// (its data slice points into that buffer, its indices are copied). gRPC
// calls release(release_arg) once per borrowing slice when it drops it;
// `*borrowed` is their number.
grpc::ByteBuffer EncodePush(const RequestHead& head, const RequestPlan& plan,
                            const RequestGroup& group,
                            absl::Span<const uint64_t> versions,
                            const float* gradient, void (*release)(void*),
                            void* release_arg, int* borrowed,
                            absl::Span<const PushPayload> payloads = {},
                            absl::Span<const uint64_t> bases = {});

struct DecodedReply {
  uint64_t data_bytes = 0;   // data (+ delta offsets) bytes received
  uint64_t dense_bytes = 0;  // the same in dense FP32
  std::vector<std::pair<uint32_t, uint64_t>> versions;  // (chunk id, version)
  uint64_t deltas = 0;  // chunks that came as deltas
};

// Checks a PushPullResponse / PullResponse (has_chunks) or a PushResponse
// (no chunks) against the group and copies each chunk's values, decoded
// by its own ChunkData.format, into the flat `params`: in full, or (a
// delta, ChunkData.base_version) the changed entries onto the copy that
// `bases` says is there. A reply that does not match or parse, names an
// unknown format, or carries a delta on another version than bases[j] or
// with bad offsets, is kDataLoss ("shard S returned ...", naming the
// field) and leaves `params` untouched: every chunk is checked first.
absl::Status DecodeReply(const grpc::ByteBuffer& reply, const RequestPlan& plan,
                         const RequestGroup& group, bool has_chunks,
                         float* params, DecodedReply* out,
                         absl::Span<const uint64_t> bases = {});

}  // namespace ps

#endif  // WORKER_CLIENT_SHARD_WIRE_H_
