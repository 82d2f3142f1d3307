// ParameterClient: what the trainer needs from the parameter servers.
//
// The trainer sees the model as one flat float vector (tensors concatenated
// in the model's tensor order); an implementation maps it onto chunks and
// shards (worker/ps_client.h talks gRPC to psd; tests use in-process fakes).
//
//   std::vector<float> params(n), grad(n);
//   PS_RETURN_IF_ERROR(client->Pull(/*step=*/0, absl::MakeSpan(params)));
//   for (uint64_t t = 0; t < steps; ++t) {
//     ... grad = mean gradient of this worker's batch at `params` ...
//     PS_RETURN_IF_ERROR(client->PushPull(t, grad, absl::MakeSpan(params)));
//   }
#ifndef WORKER_PARAMETER_CLIENT_H_
#define WORKER_PARAMETER_CLIENT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace ps {

// Thread-compatible: one trainer thread drives a client; the calls block.
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
};

}  // namespace ps

#endif  // WORKER_PARAMETER_CLIENT_H_
