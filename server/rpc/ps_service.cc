#include "server/rpc/ps_service.h"

#include "common/grpc_status.h"

namespace ps {
namespace {

// Finishes `reactor` at once with `status`.
grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx,
                               const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

// Every handler starts with the token check; the Shard never sees an
// unauthenticated request.
#define PS_AUTHENTICATE(ctx)                                      \
  do {                                                            \
    absl::Status auth = security_->CheckToken(*(ctx));            \
    if (!auth.ok()) return Done((ctx), auth);                     \
  } while (0)

grpc::ServerUnaryReactor* PsService::RegisterJob(grpc::CallbackServerContext* ctx,
                                                 const RegisterJobRequest* req,
                                                 RegisterJobResponse* resp) {
  PS_AUTHENTICATE(ctx);
  return Done(ctx, shard_->RegisterJob(*req, resp));
}

grpc::ServerUnaryReactor* PsService::DropJob(grpc::CallbackServerContext* ctx,
                                             const DropJobRequest* req,
                                             DropJobResponse*) {
  PS_AUTHENTICATE(ctx);
  return Done(ctx, shard_->DropJob(*req));
}

grpc::ServerUnaryReactor* PsService::SetMembership(grpc::CallbackServerContext* ctx,
                                                   const SetMembershipRequest* req,
                                                   SetMembershipResponse*) {
  PS_AUTHENTICATE(ctx);
  return Done(ctx, shard_->SetMembership(*req));
}

grpc::ServerUnaryReactor* PsService::PushPull(grpc::CallbackServerContext* ctx,
                                              const PushPullRequest* req,
                                              PushPullResponse* resp) {
  PS_AUTHENTICATE(ctx);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  shard_->PushPull(*req, resp, [reactor](absl::Status s) {
    reactor->Finish(ToGrpcStatus(s));
  });
  return reactor;
}

grpc::ServerUnaryReactor* PsService::Pull(grpc::CallbackServerContext* ctx,
                                          const PullRequest* req,
                                          PullResponse* resp) {
  PS_AUTHENTICATE(ctx);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  shard_->Pull(*req, resp, [reactor](absl::Status s) {
    reactor->Finish(ToGrpcStatus(s));
  });
  return reactor;
}

grpc::ServerUnaryReactor* PsService::Push(grpc::CallbackServerContext* ctx,
                                          const PushRequest* req,
                                          PushResponse* resp) {
  PS_AUTHENTICATE(ctx);
  return Done(ctx, shard_->Push(*req, resp));
}

grpc::ServerUnaryReactor* PsService::Stats(grpc::CallbackServerContext* ctx,
                                           const StatsRequest* req,
                                           ShardStats* resp) {
  PS_AUTHENTICATE(ctx);
  shard_->Stats(*req, resp);
  return Done(ctx, absl::OkStatus());
}

void ApplyTransportSettings(int max_message_bytes, grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(max_message_bytes);
  builder->SetMaxSendMessageSize(max_message_bytes);
  // Workers keep channels open across long BSP waits; allow their pings.
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
}

}  // namespace ps
