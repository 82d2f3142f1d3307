// gRPC adapter for the ParameterServer service over a Shard.
//
//   Shard shard(options);
//   PsService service(&shard, &security);
//   builder.RegisterService(&service);
//
// Thin: authenticates, hands the request to the Shard and finishes the
// reactor when the Shard calls back. A PushPull that waits for the BSP
// quorum holds no thread while it waits (callback API + Shard callbacks).
#ifndef SERVER_RPC_PS_SERVICE_H_
#define SERVER_RPC_PS_SERVICE_H_

#include "common/security.h"
#include "grpcpp/server_builder.h"
#include "proto/ps.grpc.pb.h"
#include "server/shard.h"

namespace ps {

// Thread-safe (the Shard is). Borrows `shard` and `security`, which must
// outlive the gRPC server the service is registered with.
class PsService final : public ParameterServer::CallbackService {
 public:
  PsService(Shard* shard, const Security* security)
      : shard_(shard), security_(security) {}

  grpc::ServerUnaryReactor* RegisterJob(grpc::CallbackServerContext* ctx,
                                        const RegisterJobRequest* req,
                                        RegisterJobResponse* resp) override;
  grpc::ServerUnaryReactor* DropJob(grpc::CallbackServerContext* ctx,
                                    const DropJobRequest* req,
                                    DropJobResponse* resp) override;
  grpc::ServerUnaryReactor* SetMembership(grpc::CallbackServerContext* ctx,
                                          const SetMembershipRequest* req,
                                          SetMembershipResponse* resp) override;
  grpc::ServerUnaryReactor* PushPull(grpc::CallbackServerContext* ctx,
                                     const PushPullRequest* req,
                                     PushPullResponse* resp) override;
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx,
                                 const PullRequest* req,
                                 PullResponse* resp) override;
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* ctx,
                                 const PushRequest* req,
                                 PushResponse* resp) override;
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* ctx,
                                  const StatsRequest* req,
                                  ShardStats* resp) override;

 private:
  Shard* const shard_;
  const Security* const security_;
};

// Server-side transport settings for a psd (message limits, keepalive,
// HTTP/2 tuning): kept beside the service whose traffic they shape.
void ApplyTransportSettings(int max_message_bytes, grpc::ServerBuilder* builder);

}  // namespace ps

#endif  // SERVER_RPC_PS_SERVICE_H_
