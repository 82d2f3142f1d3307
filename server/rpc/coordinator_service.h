// gRPC adapter for the Coordinator service, and ShardControl over gRPC.
//
//   GrpcShardControl shards(addresses, &security, local_shard_id, &shard);
//   auto coordinator = JobCoordinator::Create(options, &shards);
//   CoordinatorService service(&security);
//   builder.RegisterService(&service);   // before the server starts
//   ...
//   service.SetCoordinator(coordinator->get());  // once shard addresses are
//   known
#ifndef SERVER_RPC_COORDINATOR_SERVICE_H_
#define SERVER_RPC_COORDINATOR_SERVICE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/security.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/ps.grpc.pb.h"
#include "server/coordinator/coordinator.h"
#include "server/rpc/serial_executor.h"
#include "server/shard.h"

namespace ps {

// ShardControl for the coordinator: the coordinator's own shard is called
// directly, the others over gRPC with a deadline. Thread-safe.
class GrpcShardControl final : public ShardControl {
 public:
  // `security` and `local` are borrowed.
  GrpcShardControl(const std::vector<std::string>& addresses,
                   const Security* security, uint32_t local_shard_id,
                   Shard* local, absl::Duration deadline = absl::Seconds(30));

  absl::Status RegisterJob(uint32_t shard,
                           const RegisterJobRequest& request) override;
  absl::Status DropJob(uint32_t shard, const std::string& job_id) override;
  absl::Status SetMembership(uint32_t shard,
                             const SetMembershipRequest& request) override;

 private:
  std::unique_ptr<grpc::ClientContext> NewContext() const;

  const Security* const security_;
  const uint32_t local_shard_id_;
  Shard* const local_;
  const absl::Duration deadline_;
  std::vector<std::unique_ptr<ParameterServer::Stub>> stubs_;
};

// Thread-safe. Until SetCoordinator, every call fails with UNAVAILABLE
// ("coordinator starting"). Mutating calls run on a SerialExecutor (they may
// block on shard RPCs); reads and the long-poll run inline.
class CoordinatorService final : public Coordinator::CallbackService {
 public:
  explicit CoordinatorService(const Security* security) : security_(security) {}

  // `coordinator` is borrowed and must outlive the server.
  void SetCoordinator(JobCoordinator* coordinator);

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
  grpc::ServerUnaryReactor* GetHistory(grpc::CallbackServerContext* ctx,
                                       const GetHistoryRequest* req,
                                       GetHistoryResponse* resp) override;

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
  SerialExecutor executor_;
};

}  // namespace ps

#endif  // SERVER_RPC_COORDINATOR_SERVICE_H_
