#include "server/rpc/chunk_fetcher.h"

#include "common/grpc_status.h"
#include "grpcpp/grpcpp.h"

namespace ps {

absl::Status GrpcChunkFetcher::Fetch(const std::string& address,
                                     const FetchChunksRequest& req,
                                     absl::Time deadline,
                                     FetchChunksResponse* resp) {
  if (address.empty()) {
    return absl::UnavailableError("no address for the shard to fetch from");
  }
  std::shared_ptr<ParameterServer::Stub> stub;
  {
    absl::MutexLock l(&mu_);
    std::shared_ptr<ParameterServer::Stub>& s = stubs_[address];
    if (s == nullptr) {
      s = ParameterServer::NewStub(
          security_->NewChannel(address, max_message_bytes_));
    }
    stub = s;
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  security_->Authorize(&ctx);
  return FromGrpcStatus(stub->FetchChunks(&ctx, req, resp));
}

}  // namespace ps
