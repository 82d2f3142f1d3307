// PsClient: the ParameterClient that talks gRPC to the psd shards.
//
//   PS_ASSIGN_OR_RETURN(std::unique_ptr<PsClient> client,
//                       PsClient::Create(options, assignment, &security));
//   PS_RETURN_IF_ERROR(client->Pull(0, absl::MakeSpan(params)));
//   PS_RETURN_IF_ERROR(client->PushPull(0, grad, absl::MakeSpan(params)));
//
// The flat parameter vector is cut by the job's Placement into chunks; the
// chunks of one shard travel in requests of at most max_request_bytes, and
// the requests to every shard are in flight at once (up to
// max_inflight_per_shard per shard, the next one issued as soon as one
// completes), spread over channels_per_shard connections per shard. A
// request that fails with UNAVAILABLE is retried with exponential backoff
// and the same (worker, step) tag, with attempt + 1, so the shard applies it
// once.
//
// Zero-copy wire path: the messages are exactly proto/ps.proto's
// PushPullRequest / PushPullResponse / PullResponse, but they are encoded
// and decoded here rather than by protobuf. A push request's `data` fields
// are slices that point into the caller's gradient (gRPC writes them to the
// socket from there; the call returns only after gRPC released every one),
// and a reply's `data` is copied once, straight from gRPC's receive slices
// into the caller's params.
#ifndef WORKER_PS_CLIENT_H_
#define WORKER_PS_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/defaults.h"
#include "common/security.h"
#include "grpcpp/generic/generic_stub.h"
#include "proto/coordinator.pb.h"
#include "proto/ps.grpc.pb.h"
#include "worker/parameter_client.h"

namespace ps {

struct PsClientOptions {
  // Deadline of one RPC attempt. Calls that wait on other workers (BSP/SSP)
  // get at least the job's step deadline plus 5 s, so the shard's own
  // deadline error, which names the missing workers, arrives first.
  absl::Duration rpc_deadline = absl::Milliseconds(kDefaultRpcDeadlineMs);
  int max_attempts = kDefaultRpcMaxAttempts;
  absl::Duration initial_backoff =
      absl::Milliseconds(kDefaultRpcInitialBackoffMs);
  absl::Duration max_backoff = absl::Milliseconds(kDefaultRpcMaxBackoffMs);
  int max_inflight_per_shard = kDefaultMaxInflightPerShard;
  size_t max_request_bytes = 3u << 20;
  int max_message_bytes = kDefaultMaxMessageBytes;
  // gRPC channels (each its own TCP connection) to every shard; a shard's
  // requests are spread over them. One HTTP/2 connection is read and
  // written by one thread at a time, so a second one lets a large exchange
  // use both directions of two connections at once.
  int channels_per_shard = 2;
};

// Traffic counters (cumulative).
struct PsClientStats {
  uint64_t requests = 0;
  uint64_t retries = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
};

// Thread-compatible: one thread calls Pull/PushPull at a time (the trainer).
// Pull and PushPull block until every request finished and gRPC released
// every slice that borrows the caller's gradient: normally at once; if a
// shard stopped reading in the middle of a request, once gRPC gives its
// connection up (keepalive, TCP_USER_TIMEOUT).
class PsClient final : public ParameterClient {
 public:
  // `security` is borrowed and must outlive the client. Fails if the
  // assignment's placement does not cover its tensors exactly.
  static absl::StatusOr<std::unique_ptr<PsClient>> Create(
      const PsClientOptions& options, const Assignment& assignment,
      const Security* security);

  absl::Status Pull(uint64_t step, absl::Span<float> params) override;
  absl::Status PushPull(uint64_t step, absl::Span<const float> gradient,
                        absl::Span<float> params) override;

  size_t num_parameters() const { return num_parameters_; }
  PsClientStats stats() const;

 private:
  struct Chunk {
    uint32_t id;
    uint32_t shard;
    size_t flat_offset;  // elements
    size_t length;       // elements
  };
  struct Call;

  PsClient(const PsClientOptions& options, const Assignment& assignment,
           const Security* security);

  // Builds one request per group of chunks (per shard), runs them all with
  // retries, and copies the replies into `params`.
  absl::Status Exchange(uint64_t step, const float* gradient,
                        absl::Span<float> params);
  void Issue(Call* call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnDone(Call* call, grpc::Status status);
  // Encodes the call's request (PushPullRequest with its attempt, or
  // PullRequest) into call->request.
  void Encode(Call* call);
  // Checks the reply against the call's group and copies its parameters
  // into call->params; `received` counts the data bytes.
  absl::Status Decode(Call* call, uint64_t* received);
  // gRPC's destroy callback of a slice that borrows the gradient.
  static void ReleaseBorrowed(void* client);

  const PsClientOptions options_;
  const Security* const security_;
  std::string job_id_;
  uint32_t rank_ = 0;
  ConsistencyMode mode_ = BSP;
  absl::Duration wait_deadline_;
  size_t num_parameters_ = 0;
  std::vector<Chunk> chunks_;                // placement order
  std::vector<std::vector<size_t>> groups_;  // chunk indexes per request
  std::vector<uint32_t> group_shard_;
  std::vector<int> group_channel_;  // index into stubs_[shard]
  std::vector<uint64_t> versions_;  // by chunk id
  // [shard][channel]; generic stubs carry the hand-encoded messages.
  std::vector<std::vector<std::unique_ptr<grpc::GenericStub>>> stubs_;

  mutable absl::Mutex mu_;
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int> inflight_ ABSL_GUARDED_BY(mu_);  // by shard
  PsClientStats stats_ ABSL_GUARDED_BY(mu_);

  // Slices handed to gRPC that point into the caller's gradient and are not
  // yet released. Never held while calling into gRPC or taking mu_, so
  // gRPC may release slices from any thread, under any of its locks.
  absl::Mutex borrow_mu_;
  int borrowed_ ABSL_GUARDED_BY(borrow_mu_) = 0;
};

}  // namespace ps

#endif  // WORKER_PS_CLIENT_H_
