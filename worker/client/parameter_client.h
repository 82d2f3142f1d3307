// ParameterClient: what the trainer needs from the parameter servers.
//
// The trainer sees the model as one flat float vector (tensors concatenated
// in the model's tensor order); an implementation maps it onto chunks and
// shards (worker/client/ps_client.h talks gRPC to psd; tests use in-process
// fakes).
//
//   std::vector<float> params(n), grad(n);
//   PS_RETURN_IF_ERROR(client->Pull(/*step=*/0, absl::MakeSpan(params)));
//   for (uint64_t t = 0; t < steps; ++t) {
//     ... grad = mean gradient of this worker's batch at `params` ...
//     PS_RETURN_IF_ERROR(client->PushPull(t, grad, absl::MakeSpan(params)));
//   }
//
// A client that supports_exchange() also takes the step tensor by tensor,
// without blocking (the overlapped step of worker/trainer/trainer.h):
//
//   TensorExchange x;
//   x.step = t;
//   x.tensors = {"fc2/w", "fc2/b"};   // fused: one request per shard
//   x.priority = 1;                   // the first layer's is the highest
//   x.gradient = grad;                // final for these tensors
//   x.params = absl::MakeSpan(params);
//   x.done = [&](const absl::Status& s) { ... fc2's parameters are in ... };
//   client->StartExchange(std::move(x));
#ifndef WORKER_CLIENT_PARAMETER_CLIENT_H_
#define WORKER_CLIENT_PARAMETER_CLIENT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace ps {

// One asynchronous push+pull of some of the model's tensors.
struct TensorExchange {
  uint64_t step = 0;
  // Names from the job's tensors; their chunks travel together (one request
  // per shard). Must not be empty.
  std::vector<std::string> tensors;
  int priority = 0;  // higher goes on the wire first
  // The model's flat vectors, borrowed until `done` ran: the exchange reads
  // gradient and writes params only within its tensors' ranges, so
  // concurrent exchanges of other tensors may share them.
  absl::Span<const float> gradient;
  absl::Span<float> params;
  // Runs exactly once, when the exchange is over (params written, the
  // borrow ended), with its status; on any thread, possibly inside
  // StartExchange. Must not block and must not call the client.
  std::function<void(const absl::Status&)> done;
};

// Thread-compatible: one trainer thread drives Pull/PushPull, and they
// block. StartExchange is thread-safe and never blocks on the network.
class ParameterClient {
 public:
  virtual ~ParameterClient() = default;

  // Reads every parameter as the worker must see it before computing the
  // gradient of step `step` (BSP: version >= step; SSP: within the staleness
  // bound). `params` has the model's parameter count. Blocks until the
  // parameters arrive or a deadline passes.
  virtual absl::Status Pull(uint64_t step, absl::Span<float> params) = 0;

  // Pushes this worker's gradient for `step` (the mean over its batch) and
  // fills `params` with the parameters for step + 1, in one round trip.
  // A retried push keeps the (worker, step) tag, so it is applied once.
  virtual absl::Status PushPull(uint64_t step, absl::Span<const float> gradient,
                                absl::Span<float> params) = 0;

  // Whether StartExchange works (else it fails every exchange).
  virtual bool supports_exchange() const { return false; }

  // PushPull of `x.tensors` alone, asynchronous: their part of the gradient
  // of x.step goes out, their parameters for x.step + 1 come back, then
  // x.done runs. Every tensor of the model exchanged once per step is the
  // same as one PushPull (BSP: the shards sum per chunk in rank order).
  virtual void StartExchange(TensorExchange x) {
    x.done(absl::UnimplementedError("this client has no per-tensor exchange"));
  }
};

}  // namespace ps

#endif  // WORKER_CLIENT_PARAMETER_CLIENT_H_
