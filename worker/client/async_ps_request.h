// The state of AsyncPsClient's requests and their per-shard calls, shared
// by its two source files: async_ps_client.cc (starting requests, calls on
// the wire, replies, cancelling) and async_ps_dispatch.cc (how a request
// ends: Wait, Detach and the dispatch thread). Private to the library.
#ifndef WORKER_CLIENT_ASYNC_PS_REQUEST_H_
#define WORKER_CLIENT_ASYNC_PS_REQUEST_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "worker/client/async_ps_client.h"
#include "worker/client/gradient_encoder.h"
#include "worker/client/request_plan.h"
#include "worker/client/shard_wire.h"

namespace ps {
namespace async_ps_internal {

// Full method names of proto/ps.proto's ParameterServer service.
inline constexpr char kPushPullMethod[] = "/ps.ParameterServer/PushPull";
inline constexpr char kPullMethod[] = "/ps.ParameterServer/Pull";
inline constexpr char kPushMethod[] = "/ps.ParameterServer/Push";

inline bool Pushes(ParamOp op) { return op != ParamOp::kPull; }
inline bool Pulls(ParamOp op) { return op != ParamOp::kPush; }

inline const char* OpName(ParamOp op) {
  switch (op) {
    case ParamOp::kPull:
      return "Pull";
    case ParamOp::kPush:
      return "Push";
    case ParamOp::kPushPull:
      return "PushPull";
  }
  return "?";
}

}  // namespace async_ps_internal

// One Start: its calls and, once over, its status. Owned by requests_.
struct AsyncPsClient::Request {
  AsyncPsClient* client = nullptr;
  uint64_t id = 0;
  ParamRequest args;
  std::vector<std::unique_ptr<Call>> calls;
  int open_calls = 0;     // not yet ended (mu_)
  absl::Status status;    // the first error (mu_)
  bool ended = false;     // every call ended; on ended_ or finishing (mu_)
  bool over = false;      // slices released, callback run (mu_)
  bool detached = false;  // (mu_)
  // A Wait is blocked on it (mu_). A request without a callback that a Wait
  // is blocked on is finished by that Wait, not by the dispatch thread.
  bool waited = false;
  // The dispatch thread or a Wait took it off ended_ to finish it (mu_).
  bool claimed = false;
  int borrowed = 0;  // gradient slices gRPC holds (borrow_mu_)

  // Whether the Wait blocked on it finishes it (no thread hop).
  bool FinishedByWaiter() const { return waited && !args.done; }
};

// One request group to one shard, across its retries. gRPC's callback
// borrows it while on the wire.
struct AsyncPsClient::Call {
  enum class State { kQueued, kOnWire, kBackoff, kEnded };
  Request* request = nullptr;
  RequestGroup group;
  std::pair<int, uint64_t> queue_key;  // (-priority, request id)
  State state = State::kQueued;
  int attempt = 0;
  // Cancelled on the wire because its shard moved (OnShardMoved): the
  // cancellation is a retry at the new address, at once (mu_).
  bool moved = false;
  absl::Time retry_at;
  // When a shard first answered that a re-placement pauses the job at this
  // call's step (IsPausedForReplacement; InfinitePast: never): such answers
  // are retried until the attempt deadline has passed since.
  absl::Time paused_since = absl::InfinitePast();
  std::unique_ptr<grpc::ClientContext> context;
  grpc::ByteBuffer wire_request;  // PushPullRequest, PushRequest, PullRequest
  grpc::ByteBuffer response;
  // The group's gradient chunks as encoded by EncodeGradients (empty for
  // dense FP32), and views of them for EncodePush. Kept across retries.
  std::vector<EncodedChunk> encoded;
  std::vector<PushPayload> payloads;
  uint64_t dense_bytes = 0;  // the group's chunks as dense FP32
  // The versions held of the group's chunks that the attempt on the wire
  // named (delta pulls; empty: none). Set by Encode.
  std::vector<uint64_t> bases;
  int64_t issued_ns = 0;  // traced steps only (TraceRecorder::NowNs)
};

}  // namespace ps

#endif  // WORKER_CLIENT_ASYNC_PS_REQUEST_H_
