// gRPC adapter for the Coordinator service, and ShardControl over gRPC.
//
//   GrpcShardControl shards(&directory, &security, local_shard_id, &shard);
//   auto coordinator = JobCoordinator::Create(options, &shards);
//   CoordinatorService service(&security);
//   builder.RegisterService(&service);   // before the server starts
//   ...
//   service.SetCoordinator(coordinator->get(), &directory);  // once shard
//   addresses are known
#ifndef SERVER_RPC_COORDINATOR_SERVICE_H_
#define SERVER_RPC_COORDINATOR_SERVICE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/defaults.h"
#include "common/security.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/ps.grpc.pb.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/shard_directory.h"
#include "server/rpc/serial_executor.h"
#include "server/shard.h"

namespace ps {

// ShardControl for the coordinator: the coordinator's own shard is called
// directly, the others over gRPC with a deadline. A shard that moved (its
// address file rewritten) is followed: while a shard cannot be connected
// to, its address is looked up in the directory every `probe`, and the
// call goes to the new one; a call is sent once, to a connected shard, so
// it is never applied twice. Thread-safe.
class GrpcShardControl final : public ShardControl {
 public:
  // `directory`, `security` and `local` are borrowed.
  GrpcShardControl(
      ShardDirectory* directory, const Security* security,
      uint32_t local_shard_id, Shard* local,
      absl::Duration deadline = absl::Seconds(30),
      absl::Duration probe = absl::Milliseconds(kDefaultShardAddressRefreshMs));

  absl::Status RegisterJob(uint32_t shard,
                           const RegisterJobRequest& request) override;
  absl::Status DropJob(uint32_t shard, const std::string& job_id) override;
  absl::Status SetMembership(uint32_t shard,
                             const SetMembershipRequest& request) override;
  // The coordinator's shard heartbeat (replica view) for replicated jobs:
  // one try until `deadline`, failing at once when the shard is down.
  absl::Status SetReplicaView(uint32_t shard,
                              const SetReplicaViewRequest& request,
                              absl::Time deadline,
                              SetReplicaViewResponse* response);
  // One phase of a live re-placement (ReshardRequest): one try until
  // `deadline`, failing at once when the shard is down.
  absl::Status Reshard(uint32_t shard, const ReshardRequest& request,
                       absl::Time deadline, ReshardResponse* response);

 private:
  // One remote shard: the address its channel goes to.
  struct Peer {
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    std::shared_ptr<ParameterServer::Stub> stub;
  };

  std::unique_ptr<grpc::ClientContext> NewContext() const;
  // The stub of `shard`, connected, at its current address; waits (probing
  // the directory) up to the call deadline. UNAVAILABLE naming the shard and
  // its address when it cannot be reached by then; INVALID_ARGUMENT for a
  // shard out of range.
  absl::StatusOr<std::shared_ptr<ParameterServer::Stub>> Connected(
      uint32_t shard) ABSL_LOCKS_EXCLUDED(mu_);
  // The peer of `shard` at its current address, without waiting for it to
  // be reachable; INVALID_ARGUMENT for a shard out of range.
  absl::StatusOr<Peer> Current(uint32_t shard) ABSL_LOCKS_EXCLUDED(mu_);
  // The peer for `address`, a new channel if the shard moved.
  Peer PeerAt(uint32_t shard, const std::string& address)
      ABSL_LOCKS_EXCLUDED(mu_);

  ShardDirectory* const directory_;
  const Security* const security_;
  const uint32_t local_shard_id_;
  Shard* const local_;
  const absl::Duration deadline_;
  const absl::Duration probe_;
  absl::Mutex mu_;
  std::vector<Peer> peers_ ABSL_GUARDED_BY(mu_);  // by shard
};

// Thread-safe. Until SetCoordinator, every call fails with UNAVAILABLE
// ("coordinator starting"). Mutating calls run on a SerialExecutor (they may
// block on shard RPCs); reads and the long-poll run inline.
class CoordinatorService final : public Coordinator::CallbackService {
 public:
  explicit CoordinatorService(const Security* security) : security_(security) {}

  // `coordinator` and `directory` are borrowed and must outlive the server.
  // `directory` answers GetShardAddresses (null: UNAVAILABLE).
  void SetCoordinator(JobCoordinator* coordinator,
                      ShardDirectory* directory = nullptr);

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* ctx,
                                      const SubmitJobRequest* req,
                                      SubmitJobResponse* resp) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx,
                                   const GetJobRequest* req,
                                   JobStatus* resp) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const ListJobsRequest* req,
                                     ListJobsResponse* resp) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx,
                                      const CancelJobRequest* req,
                                      CancelJobResponse* resp) override;
  grpc::ServerUnaryReactor* RegisterWorker(
      grpc::CallbackServerContext* ctx, const RegisterWorkerRequest* req,
      RegisterWorkerResponse* resp) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const HeartbeatRequest* req,
                                      HeartbeatResponse* resp) override;
  grpc::ServerUnaryReactor* GetAssignment(grpc::CallbackServerContext* ctx,
                                          const GetAssignmentRequest* req,
                                          GetAssignmentResponse* resp) override;
  grpc::ServerUnaryReactor* ReportProgress(
      grpc::CallbackServerContext* ctx, const ProgressReport* req,
      ProgressReportResponse* resp) override;
  grpc::ServerUnaryReactor* ScaleJob(grpc::CallbackServerContext* ctx,
                                     const ScaleJobRequest* req,
                                     ScaleJobResponse* resp) override;
  grpc::ServerUnaryReactor* Unregister(grpc::CallbackServerContext* ctx,
                                       const UnregisterRequest* req,
                                       UnregisterResponse* resp) override;
  grpc::ServerUnaryReactor* GetDataPlan(grpc::CallbackServerContext* ctx,
                                        const GetDataPlanRequest* req,
                                        GetDataPlanResponse* resp) override;
  grpc::ServerUnaryReactor* GetHistory(grpc::CallbackServerContext* ctx,
                                       const GetHistoryRequest* req,
                                       GetHistoryResponse* resp) override;
  grpc::ServerUnaryReactor* StartTrace(grpc::CallbackServerContext* ctx,
                                       const StartTraceRequest* req,
                                       StartTraceResponse* resp) override;
  grpc::ServerUnaryReactor* UploadTrace(grpc::CallbackServerContext* ctx,
                                        const UploadTraceRequest* req,
                                        UploadTraceResponse* resp) override;
  grpc::ServerUnaryReactor* GetTrace(grpc::CallbackServerContext* ctx,
                                     const GetTraceRequest* req,
                                     GetTraceResponse* resp) override;
  // Re-reads the address files (at most once per refresh interval) inline.
  grpc::ServerUnaryReactor* GetShardAddresses(
      grpc::CallbackServerContext* ctx, const ShardAddressesRequest* req,
      ShardAddressesResponse* resp) override;

 private:
  using Call = std::function<absl::Status(JobCoordinator&)>;

  // The coordinator once the caller's token checks out and SetCoordinator
  // ran; else the status to answer with.
  absl::StatusOr<JobCoordinator*> Ready(grpc::CallbackServerContext* ctx);
  // A call that never blocks: run inline.
  grpc::ServerUnaryReactor* Inline(grpc::CallbackServerContext* ctx,
                                   const Call& call);
  // A call that may block on shard RPCs: run on the executor. What `call`
  // captures must live until the RPC finishes (request and response do).
  grpc::ServerUnaryReactor* Serial(grpc::CallbackServerContext* ctx, Call call);

  const Security* const security_;
  absl::Mutex mu_;
  JobCoordinator* coordinator_ ABSL_GUARDED_BY(mu_) = nullptr;
  ShardDirectory* directory_ ABSL_GUARDED_BY(mu_) = nullptr;
  SerialExecutor executor_;
};

}  // namespace ps

#endif  // SERVER_RPC_COORDINATOR_SERVICE_H_
