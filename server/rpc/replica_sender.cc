#include "server/rpc/replica_sender.h"

#include "common/grpc_status.h"
#include "grpcpp/grpcpp.h"

namespace ps {

absl::Status GrpcReplicaSender::Send(const std::string& address,
                                     const ReplicateRequest& req,
                                     absl::Time deadline) {
  if (address.empty()) {
    return absl::UnavailableError("no address for the backup yet");
  }
  std::shared_ptr<ParameterServer::Stub> stub;
  {
    absl::MutexLock l(&mu_);
    std::shared_ptr<ParameterServer::Stub>& s = stubs_[address];
    if (s == nullptr) {
      s = ParameterServer::NewStub(security_->NewChannel(address));
    }
    stub = s;
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  security_->Authorize(&ctx);
  ReplicateResponse resp;
  return FromGrpcStatus(stub->Replicate(&ctx, req, &resp));
}

}  // namespace ps
