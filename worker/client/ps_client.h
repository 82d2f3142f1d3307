// PsClient: the ParameterClient that talks gRPC to the psd shards; its
// blocking Pull and PushPull are thin wrappers over AsyncPsClient
// (worker/client/async_ps_client.h), which says how requests travel: chunks per
// shard in requests of at most max_request_bytes, pipelined up to
// max_inflight_per_shard per shard over channels_per_shard connections,
// UNAVAILABLE retried with the same (worker, step) tag and attempt + 1,
// push payloads sent zero-copy from the caller's gradient.
//
//   PS_ASSIGN_OR_RETURN(std::unique_ptr<PsClient> client,
//                       PsClient::Create(options, assignment, &security));
//   PS_RETURN_IF_ERROR(client->Pull(0, absl::MakeSpan(params)));
//   PS_RETURN_IF_ERROR(client->PushPull(0, grad, absl::MakeSpan(params)));
#ifndef WORKER_CLIENT_PS_CLIENT_H_
#define WORKER_CLIENT_PS_CLIENT_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "common/security.h"
#include "proto/coordinator.pb.h"
#include "worker/client/async_ps_client.h"
#include "worker/client/parameter_client.h"

namespace ps {

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
  bool supports_exchange() const override { return true; }
  // One AsyncPsClient request (kPushPull of x.tensors, x.priority),
  // detached: x.done is its callback (on the client's dispatch thread).
  void StartExchange(TensorExchange x) override;

  size_t num_parameters() const { return client_->num_parameters(); }
  PsClientStats stats() const { return client_->stats(); }
  // The asynchronous client underneath (per-tensor requests, priorities).
  AsyncPsClient* async() { return client_.get(); }

 private:
  explicit PsClient(std::unique_ptr<AsyncPsClient> client)
      : client_(std::move(client)) {}

  const std::unique_ptr<AsyncPsClient> client_;
};

}  // namespace ps

#endif  // WORKER_CLIENT_PS_CLIENT_H_
