// gRPC adapter for the ParameterServer service over a Shard.
//
//   Shard shard(options);
//   PsService service(&shard, &security);
//   grpc::ServerBuilder builder;
//   ApplyTransportSettings(max_message_bytes, &builder);
//   builder.RegisterService(&service);
//
// Thin: authenticates, hands the request to the Shard and finishes the
// reactor when the Shard calls back. A PushPull that waits for the BSP
// quorum holds no thread while it waits (callback API + Shard callbacks).
//
// PushPull and Pull, the calls that carry tensors, are raw methods. A
// PushPull request is decoded in place (server/rpc/push_decoder.h): its
// gradients stay in gRPC's receive slices, which a BSP shard keeps until
// the step is applied instead of copying them; a Pull request is parsed
// into a pooled message. The reply is written as proto/ps.proto's
// PushPullResponse / PullResponse wire format with each ChunkData.data
// slice pointing into the pooled reply message instead of being serialized
// (copied) again. The bytes on the wire are exactly what protobuf would
// write.
#ifndef SERVER_RPC_PS_SERVICE_H_
#define SERVER_RPC_PS_SERVICE_H_

#include <memory>

#include "common/security.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/ps.grpc.pb.h"
#include "server/shard.h"

namespace ps {

// Recycles the messages of finished PushPull / Pull calls (ps_service.cc).
class PsMessagePool;
// The PREPARE threads still running (ps_service.cc).
struct PsThreads;

// Thread-safe (the Shard is). Borrows `shard` and `security`, which must
// outlive the gRPC server the service is registered with.
class PsService final
    : public ParameterServer::WithRawCallbackMethod_PushPull<
          ParameterServer::WithRawCallbackMethod_Pull<
              ParameterServer::WithRawCallbackMethod_SparseExchange<
                  ParameterServer::CallbackService>>> {
 public:
  PsService(Shard* shard, const Security* security);
  // Waits for the PREPARE threads (each bounded by the shard's fetch
  // deadlines).
  ~PsService() override;

  grpc::ServerUnaryReactor* RegisterJob(grpc::CallbackServerContext* ctx,
                                        const RegisterJobRequest* req,
                                        RegisterJobResponse* resp) override;
  grpc::ServerUnaryReactor* DropJob(grpc::CallbackServerContext* ctx,
                                    const DropJobRequest* req,
                                    DropJobResponse* resp) override;
  grpc::ServerUnaryReactor* SetMembership(grpc::CallbackServerContext* ctx,
                                          const SetMembershipRequest* req,
                                          SetMembershipResponse* resp) override;
  // Raw: `req` holds a PushPullRequest, `resp` receives a PushPullResponse.
  // A request that does not parse fails with INVALID_ARGUMENT.
  grpc::ServerUnaryReactor* PushPull(grpc::CallbackServerContext* ctx,
                                     const grpc::ByteBuffer* req,
                                     grpc::ByteBuffer* resp) override;
  // Raw: PullRequest in, PullResponse out.
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx,
                                 const grpc::ByteBuffer* req,
                                 grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* ctx,
                                 const PushRequest* req,
                                 PushResponse* resp) override;
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* ctx,
                                  const StatsRequest* req,
                                  ShardStats* resp) override;
  grpc::ServerUnaryReactor* SetTrace(grpc::CallbackServerContext* ctx,
                                     const SetTraceRequest* req,
                                     SetTraceResponse* resp) override;
  grpc::ServerUnaryReactor* SetReplicaView(
      grpc::CallbackServerContext* ctx, const SetReplicaViewRequest* req,
      SetReplicaViewResponse* resp) override;
  grpc::ServerUnaryReactor* Replicate(grpc::CallbackServerContext* ctx,
                                      const ReplicateRequest* req,
                                      ReplicateResponse* resp) override;
  grpc::ServerUnaryReactor* GetTrace(grpc::CallbackServerContext* ctx,
                                     const ShardTraceRequest* req,
                                     ShardTrace* resp) override;
  // Live re-placement (Shard::Reshard). A PREPARE, which waits for other
  // shards' FetchChunks, runs on a thread of its own, not on gRPC's.
  grpc::ServerUnaryReactor* Reshard(grpc::CallbackServerContext* ctx,
                                    const ReshardRequest* req,
                                    ReshardResponse* resp) override;
  grpc::ServerUnaryReactor* FetchChunks(grpc::CallbackServerContext* ctx,
                                        const FetchChunksRequest* req,
                                        FetchChunksResponse* resp) override;
  // Raw: SparseExchangeRequest in (decoded by server/rpc/sparse_decoder.h),
  // SparseExchangeResponse out (hand-encoded, the rows borrowed). gRPC
  // keeps `resp` until the reactor finishes, which is when the Shard calls
  // back. A request that does not parse fails with INVALID_ARGUMENT.
  grpc::ServerUnaryReactor* SparseExchange(grpc::CallbackServerContext* ctx,
                                           const grpc::ByteBuffer* req,
                                           grpc::ByteBuffer* resp) override;
  // Server streaming (ps_service_export.cc): the table is read on a thread
  // of the call's own, one message ahead of the client (flow control).
  grpc::ServerWriteReactor<SparseRows>* ExportRows(
      grpc::CallbackServerContext* ctx, const ExportRowsRequest* req) override;

 private:
  Shard* const shard_;
  const Security* const security_;
  // Shared with the messages in flight, whose reply slices may outlive
  // this service by a little (gRPC releases them when their writes end).
  const std::shared_ptr<PsMessagePool> pool_;
  // Shared with the PREPARE threads, which may outlive a call's Finish.
  const std::shared_ptr<PsThreads> threads_;
};

// Server-side transport settings for a psd (message limits, keepalive,
// HTTP/2 tuning): kept beside the service whose traffic they shape.
void ApplyTransportSettings(int max_message_bytes,
                            grpc::ServerBuilder* builder);

}  // namespace ps

#endif  // SERVER_RPC_PS_SERVICE_H_
