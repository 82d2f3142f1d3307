// AsyncPsClient: the asynchronous client of the psd shards. A push, a pull
// or a push+pull of one tensor (or of the whole model) is started without
// blocking and returns a handle; Wait(handle, deadline) collects its status.
// Modeled on ps-lite's KVWorker (Push/Pull return a timestamp, Wait(ts)) and
// TensorFlow's async-first interfaces; PsClient's blocking Pull/PushPull are
// wrappers over it.
//
//   PS_ASSIGN_OR_RETURN(std::unique_ptr<AsyncPsClient> client,
//                       AsyncPsClient::Create(options, assignment, &security));
//   ParamRequest push;
//   push.op = ParamOp::kPushPull;
//   push.step = t;
//   push.tensor = "fc2.weight";       // "" = every tensor
//   push.gradient = grad;             // the flat gradient, borrowed
//   push.params = absl::MakeSpan(params);
//   push.priority = 2;                // higher goes on the wire first
//   RequestHandle h = client->Start(std::move(push));
//   ... backward of the next layer ...
//   PS_RETURN_IF_ERROR(client->Wait(h, absl::Now() + absl::Seconds(60)));
//
// A request is cut into per-shard calls (RequestPlan, at most
// max_request_bytes each). Every shard has max_inflight_per_shard calls on
// the wire; the others wait in that shard's queue, highest priority first,
// then in start order. A call that fails with UNAVAILABLE is retried with
// exponential backoff and the same (worker, step) tag, with attempt + 1, so
// the shard applies it once; any other error, or the last attempt's, ends
// the request (its other calls are cancelled) with a status that names the
// shard and its address and keeps the shard's code (ABORTED: the job was
// re-placed, and its requests carry an older Placement.epoch). With
// PsClientOptions.locate_shards, a shard that keeps failing is looked for
// at the coordinator, and followed if it moved.
//
// Borrowed buffers: `gradient` and `params` are the model's flat vectors
// (num_parameters() floats); a request reads gradient[r] and writes
// params[r] only for the ranges r of its tensor. In the default wire
// format (dense FP32) the push payload goes to gRPC as slices pointing into
// `gradient` (zero copy); in BF16/FP16 or with top-k (the job's WireSpec)
// Start encodes the gradient into buffers the request owns (GradientEncoder,
// which keeps the top-k residuals) and gRPC's slices point into those. Both
// must stay valid and `gradient` unchanged until the request is over: its
// callback ran or Wait returned its final status; Cancel does not end the
// borrow earlier. A request is over only once gRPC released every slice of the
// gradient. Concurrent requests may share the vectors if their tensors differ.
//
// Life of a request (each of its per-shard calls):
//
//   Start --> queued --(room on the shard, by priority)--> on the wire
//               ^                                            |
//               +---- backoff <---- UNAVAILABLE, retry ------+
//                                                            |
//   Cancel, or a sibling call failed --> ended <-- reply ----+
//
//   every call ended --> gRPC released the gradient's slices --> callback
//   --> over: Wait returns its status.
#ifndef WORKER_CLIENT_ASYNC_PS_CLIENT_H_
#define WORKER_CLIENT_ASYNC_PS_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/defaults.h"
#include "common/security.h"
#include "common/trace_recorder.h"
#include "grpcpp/generic/generic_stub.h"
#include "proto/coordinator.pb.h"
#include "worker/client/gradient_encoder.h"
#include "worker/client/ps_client_options.h"
#include "worker/client/request_handle.h"
#include "worker/client/request_plan.h"
#include "worker/client/retry_policy.h"
#include "worker/client/shard_channels.h"

namespace ps {

// Traffic counters (cumulative).
struct PsClientStats {
  uint64_t requests = 0;  // RPC attempts
  uint64_t retries = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  // The gradient and parameter payloads as dense FP32 (what bytes_sent and
  // bytes_received would hold, roughly, in the default wire format).
  uint64_t dense_bytes_sent = 0;
  uint64_t dense_bytes_received = 0;
  // Gradient chunks sent as FP32 because a value did not fit the job's
  // narrow wire format (logged once).
  uint64_t wire_fallbacks = 0;
  // Parameter chunks received as deltas (PsClientOptions.delta_pulls).
  uint64_t delta_chunks = 0;
};

enum class ParamOp {
  kPull,      // Pull: params of version >= step (BSP) or within staleness
  kPush,      // Push: the gradient of `step` only
  kPushPull,  // PushPull: the gradient, then the params for step + 1
};

struct ParamRequest {
  ParamOp op = ParamOp::kPushPull;
  uint64_t step = 0;
  std::string tensor;  // "" = every parameter of the model
  // Several tensors fused into one request per shard (small tensors would
  // otherwise pay a message each); `tensor` must then be "".
  std::vector<std::string> tensors;
  absl::Span<const float> gradient;  // kPush, kPushPull: borrowed, see above
  absl::Span<float> params;          // kPull, kPushPull: borrowed
  int priority = 0;                  // higher first; ties in start order
  // Optional. Runs exactly once when the request is over, with its final
  // status (also when it was cancelled or refused at Start), on the
  // client's dispatch thread, before Wait returns. It may Start or Cancel
  // requests, never Wait; it should be short (it delays other callbacks).
  std::function<void(const absl::Status&)> done;
};

// Thread-safe: any thread may Start, Wait, Cancel and Detach.
class AsyncPsClient {
 public:
  // `security` is borrowed and must outlive the client. Fails if the
  // assignment's placement does not cover its tensors exactly.
  static absl::StatusOr<std::unique_ptr<AsyncPsClient>> Create(
      const PsClientOptions& options, const Assignment& assignment,
      const Security* security);
  // Cancels every request not yet over and blocks until each is over (its
  // callback ran); then forgets the handles.
  ~AsyncPsClient();

  // Never blocks on the network. Bad arguments (buffer sizes, an unknown
  // tensor) end the request at once with kInvalidArgument / kNotFound.
  RequestHandle Start(ParamRequest request);
  // Blocks until the request is over or `deadline` passes. Over: returns
  // its status and forgets the handle. Deadline first: DEADLINE_EXCEEDED;
  // the request carries on (Wait again, Cancel, or Detach). An unknown
  // handle: kInvalidArgument.
  absl::Status Wait(RequestHandle handle,
                    absl::Time deadline = absl::InfiniteFuture());
  // Ends the request early: queued calls are dropped, calls on the wire
  // cancelled. Its status becomes CANCELLED unless it was already over.
  // Does not block; Wait for the borrow to end.
  void Cancel(RequestHandle handle);
  // Cancels every request not yet over, and ends every later one at Start
  // with CANCELLED (`why`): for a worker that is stopping, so that no call
  // rides out its retries. Does not block; irreversible.
  void CancelAll(const std::string& why);
  // Nobody will Wait: the handle is forgotten once the request is over.
  void Detach(RequestHandle handle);

  const RequestPlan& plan() const { return plan_; }
  // The placement epoch its requests carry (the assignment's).
  uint64_t placement_epoch() const { return placement_epoch_; }
  size_t num_parameters() const { return plan_.num_parameters(); }
  PsClientStats stats() const;
  // The job's gradient encoder, for the client that replaces this one
  // (PsClientOptions::encoder).
  std::shared_ptr<GradientEncoder> encoder() const { return encoder_; }

 private:
  struct Request;
  struct Call;

  AsyncPsClient(const PsClientOptions& options, const Assignment& assignment,
                const Security* security, RequestPlan plan);

  absl::Status Validate(const ParamRequest& r) const;
  // Encodes the gradient of each call of `r` for the wire (not for dense
  // FP32). Runs in Start, outside mu_.
  void EncodeGradients(Request* r);
  // Queues the calls of `r`; puts one that cannot start on ended_.
  void Enqueue(Request* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Issues queued calls while their shard has room.
  void Pump() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Issue(Call* call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Encode(Call* call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnDone(Call* call, grpc::Status status);
  // Whether `call`, which ended with `status`, goes again: RetryPolicy's
  // rule, except that a shard's answer that a re-placement pauses the job
  // (IsPausedForReplacement) goes again until the attempt deadline has
  // passed since the first such answer, however many attempts that takes.
  bool RetriesCall(Call& call, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records a traced call's spans (Call::issued_ns set): replied_ns is when
  // its reply arrived; the decode ends now.
  void TraceCall(Call& call, int64_t replied_ns);
  void EndCall(Call* call, absl::Status status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends every call of `r` not yet ended or on the wire; cancels those on
  // the wire.
  void StopCalls(Request* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CancelLocked(Request* r, absl::Status why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The dispatch thread: retries after backoff, finishes ended requests
  // once their slices are released, runs callbacks.
  void Dispatch();
  // True once `r` is over (slices released, callback run).
  bool TryFinish(Request* r);
  // Drops the ended calls' contexts and requests (so gRPC lets go of the
  // gradient) and waits until `deadline` for every borrowed slice to be
  // released; false if some are still held. `r` is claimed by the caller.
  bool ReleaseCalls(Request* r, absl::Time deadline);
  // The first half of ReleaseCalls: drops the contexts and requests only.
  void DropWire(Request* r);
  // `r` is over: counts it out and forgets it if detached.
  void MarkOver(Request* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Wake();
  // gRPC's destroy callback of a slice that borrows a gradient.
  static void ReleaseBorrowed(void* request);
  // `shard` moved (ShardChannels switched it): its retries go now.
  void OnShardMoved(uint32_t shard) ABSL_LOCKS_EXCLUDED(mu_);

  const PsClientOptions options_;
  const Security* const security_;
  const RequestPlan plan_;
  const std::string job_id_;
  const uint32_t rank_;
  // The assignment's Placement.epoch, sent with every request: a shard
  // that holds the job at a later epoch refuses it with ABORTED.
  const uint64_t placement_epoch_;
  const ConsistencyMode mode_;
  const RetryPolicy retry_;
  // The job's wire format and the top-k residuals (thread-safe; shared
  // with the next client of the job, PsClientOptions::encoder).
  std::shared_ptr<GradientEncoder> encoder_;
  std::atomic<bool> fallback_logged_{false};

  mutable absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Request>> requests_
      ABSL_GUARDED_BY(mu_);
  // Per shard: calls waiting for room, keyed by (-priority, start order).
  std::vector<std::multimap<std::pair<int, uint64_t>, Call*>> queues_
      ABSL_GUARDED_BY(mu_);
  std::vector<int> inflight_ ABSL_GUARDED_BY(mu_);  // by shard
  std::vector<Call*> backoff_ ABSL_GUARDED_BY(mu_);
  std::vector<Request*> ended_ ABSL_GUARDED_BY(mu_);     // for Dispatch
  std::vector<uint64_t> versions_ ABSL_GUARDED_BY(mu_);  // by chunk id
  // Delta pulls: per chunk id, the version the last successful pull wrote
  // into which params buffer (kNotHeld: none).
  struct Held {
    uint64_t version = UINT64_MAX;
    const float* params = nullptr;
  };
  const bool delta_pulls_;
  std::vector<Held> held_ ABSL_GUARDED_BY(mu_);
  PsClientStats stats_ ABSL_GUARDED_BY(mu_);
  int active_ ABSL_GUARDED_BY(mu_) = 0;  // requests not yet over
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // CancelAll's reason; non-empty: every request ends CANCELLED.
  std::string cancel_all_ ABSL_GUARDED_BY(mu_);

  // Leaf locks, taken from gRPC's slice release (any thread, under any of
  // its locks): never held while calling into gRPC or taking mu_.
  absl::Mutex borrow_mu_;
  absl::Mutex wake_mu_;
  bool wake_ ABSL_GUARDED_BY(wake_mu_) = false;

  std::thread dispatcher_;
  // Generic stubs (they carry the hand-encoded messages), following moved
  // shards. Last: its relocator thread calls OnShardMoved; it stops
  // following at the end of the destructor's body.
  std::unique_ptr<ShardChannels<grpc::GenericStub>> channels_;
};

}  // namespace ps

#endif  // WORKER_CLIENT_ASYNC_PS_CLIENT_H_
