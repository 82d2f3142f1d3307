#include "worker/client/ps_client.h"

#include <utility>

#include "common/status_macros.h"

namespace ps {

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Create(
    const PsClientOptions& options, const Assignment& assignment,
    const Security* security) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<AsyncPsClient> client,
                      AsyncPsClient::Create(options, assignment, security));
  return std::unique_ptr<PsClient>(new PsClient(std::move(client)));
}

absl::Status PsClient::Pull(uint64_t step, absl::Span<float> params) {
  ParamRequest r;
  r.op = ParamOp::kPull;
  r.step = step;
  r.params = params;
  return client_->Wait(client_->Start(std::move(r)));
}

absl::Status PsClient::PushPull(uint64_t step, absl::Span<const float> gradient,
                                absl::Span<float> params) {
  ParamRequest r;
  r.op = ParamOp::kPushPull;
  r.step = step;
  r.gradient = gradient;
  r.params = params;
  return client_->Wait(client_->Start(std::move(r)));
}

void PsClient::StartExchange(TensorExchange x) {
  ParamRequest r;
  r.op = ParamOp::kPushPull;
  r.step = x.step;
  r.tensors = std::move(x.tensors);
  r.gradient = x.gradient;
  r.params = x.params;
  r.priority = x.priority;
  r.done = std::move(x.done);
  client_->Detach(client_->Start(std::move(r)));
}

}  // namespace ps
