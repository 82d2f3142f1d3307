#include "server/rpc/coordinator_service.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace ps {

GrpcShardControl::GrpcShardControl(ShardDirectory* directory,
                                   const Security* security,
                                   uint32_t local_shard_id, Shard* local,
                                   absl::Duration deadline,
                                   absl::Duration probe)
    : directory_(directory),
      security_(security),
      local_shard_id_(local_shard_id),
      local_(local),
      deadline_(deadline),
      probe_(probe) {
  absl::MutexLock lock(&mu_);
  peers_.resize(directory_->num_shards());
}

std::unique_ptr<grpc::ClientContext> GrpcShardControl::NewContext() const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + deadline_));
  // A shard that is still starting is waited for.
  ctx->set_wait_for_ready(true);
  security_->Authorize(ctx.get());
  return ctx;
}

GrpcShardControl::Peer GrpcShardControl::PeerAt(uint32_t shard,
                                                const std::string& address) {
  absl::MutexLock lock(&mu_);
  Peer& peer = peers_[shard];
  if (peer.stub == nullptr || peer.address != address) {
    if (peer.stub != nullptr) {
      spdlog::info("coordinator: shard {} now at {} (was {})", shard, address,
                   peer.address);
    }
    peer.address = address;
    peer.channel = security_->NewChannel(address);
    peer.stub = ParameterServer::NewStub(peer.channel);
  }
  return peer;
}

absl::StatusOr<GrpcShardControl::Peer> GrpcShardControl::Current(
    uint32_t shard) {
  if (shard >= directory_->num_shards()) {
    return absl::InvalidArgumentError(absl::StrCat("shard ", shard));
  }
  return PeerAt(shard, directory_->Address(shard));
}

absl::StatusOr<std::shared_ptr<ParameterServer::Stub>>
GrpcShardControl::Connected(uint32_t shard) {
  if (shard >= directory_->num_shards()) {
    return absl::InvalidArgumentError(absl::StrCat("shard ", shard));
  }
  const absl::Time deadline = absl::Now() + deadline_;
  while (true) {
    Peer peer = PeerAt(shard, directory_->Address(shard));
    const absl::Time until = std::min(deadline, absl::Now() + probe_);
    if (peer.channel->WaitForConnected(absl::ToChronoTime(until))) {
      return peer.stub;
    }
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(absl::StrCat(
          "shard ", shard, " at ", peer.address, ": not reachable within ",
          absl::FormatDuration(deadline_)));
    }
  }
}

absl::Status GrpcShardControl::RegisterJob(uint32_t shard,
                                           const RegisterJobRequest& request) {
  if (shard == local_shard_id_) {
    RegisterJobResponse resp;
    return local_->RegisterJob(request, &resp);
  }
  PS_ASSIGN_OR_RETURN(std::shared_ptr<ParameterServer::Stub> stub,
                      Connected(shard));
  RegisterJobResponse resp;
  return FromGrpcStatus(stub->RegisterJob(NewContext().get(), request, &resp));
}

absl::Status GrpcShardControl::DropJob(uint32_t shard,
                                       const std::string& job_id) {
  DropJobRequest req;
  req.set_job_id(job_id);
  if (shard == local_shard_id_) return local_->DropJob(req);
  PS_ASSIGN_OR_RETURN(std::shared_ptr<ParameterServer::Stub> stub,
                      Connected(shard));
  DropJobResponse resp;
  return FromGrpcStatus(stub->DropJob(NewContext().get(), req, &resp));
}

absl::Status GrpcShardControl::SetMembership(
    uint32_t shard, const SetMembershipRequest& request) {
  if (shard == local_shard_id_) return local_->SetMembership(request);
  PS_ASSIGN_OR_RETURN(std::shared_ptr<ParameterServer::Stub> stub,
                      Connected(shard));
  SetMembershipResponse resp;
  return FromGrpcStatus(
      stub->SetMembership(NewContext().get(), request, &resp));
}

absl::Status GrpcShardControl::SetReplicaView(
    uint32_t shard, const SetReplicaViewRequest& request, absl::Time deadline,
    SetReplicaViewResponse* resp) {
  if (shard == local_shard_id_) return local_->SetReplicaView(request, resp);
  // No wait_for_ready: a dead shard must fail the heartbeat at once.
  PS_ASSIGN_OR_RETURN(Peer peer, Current(shard));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  security_->Authorize(&ctx);
  return FromGrpcStatus(peer.stub->SetReplicaView(&ctx, request, resp));
}

absl::Status GrpcShardControl::Reshard(uint32_t shard,
                                       const ReshardRequest& request,
                                       absl::Time deadline,
                                       ReshardResponse* resp) {
  if (shard == local_shard_id_) return local_->Reshard(request, resp);
  // No wait_for_ready: a shard that dies in a move must abort it at once
  // (the live shards lift the pause), not hold the job paused while the
  // call waits for it to come back.
  PS_ASSIGN_OR_RETURN(Peer peer, Current(shard));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  security_->Authorize(&ctx);
  return FromGrpcStatus(peer.stub->Reshard(&ctx, request, resp));
}

void CoordinatorService::SetCoordinator(JobCoordinator* coordinator,
                                        ShardDirectory* directory) {
  absl::MutexLock lock(&mu_);
  coordinator_ = coordinator;
  directory_ = directory;
}

absl::StatusOr<JobCoordinator*> CoordinatorService::Ready(
    grpc::CallbackServerContext* ctx) {
  PS_RETURN_IF_ERROR(security_->CheckToken(*ctx));
  absl::MutexLock lock(&mu_);
  if (coordinator_ == nullptr) {
    return absl::UnavailableError(
        "coordinator starting: waiting for every shard's address");
  }
  return coordinator_;
}

namespace {

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* ctx,
                                 const absl::Status& s) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(s));
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* CoordinatorService::Inline(
    grpc::CallbackServerContext* ctx, const Call& call) {
  absl::StatusOr<JobCoordinator*> c = Ready(ctx);
  return Finish(ctx, c.ok() ? call(**c) : c.status());
}

grpc::ServerUnaryReactor* CoordinatorService::Serial(
    grpc::CallbackServerContext* ctx, Call call) {
  absl::StatusOr<JobCoordinator*> c = Ready(ctx);
  if (!c.ok()) return Finish(ctx, c.status());
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  executor_.Schedule([c = *c, call = std::move(call), reactor] {
    reactor->Finish(ToGrpcStatus(call(*c)));
  });
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::SubmitJob(
    grpc::CallbackServerContext* ctx, const SubmitJobRequest* req,
    SubmitJobResponse* resp) {
  return Serial(ctx, [req, resp](JobCoordinator& c) {
    absl::Status s = c.SubmitJob(*req, resp);
    // A rejected spec is an answer, not a failed call: gRPC drops the
    // response body on errors, and the client needs every problem listed.
    if (!s.ok() && resp->problems_size() > 0) s = absl::OkStatus();
    return s;
  });
}

grpc::ServerUnaryReactor* CoordinatorService::GetJob(
    grpc::CallbackServerContext* ctx, const GetJobRequest* req,
    JobStatus* resp) {
  return Inline(ctx, [&](JobCoordinator& c) { return c.GetJob(*req, resp); });
}

grpc::ServerUnaryReactor* CoordinatorService::ListJobs(
    grpc::CallbackServerContext* ctx, const ListJobsRequest* req,
    ListJobsResponse* resp) {
  return Inline(ctx, [&](JobCoordinator& c) { return c.ListJobs(*req, resp); });
}

grpc::ServerUnaryReactor* CoordinatorService::CancelJob(
    grpc::CallbackServerContext* ctx, const CancelJobRequest* req,
    CancelJobResponse* resp) {
  return Serial(
      ctx, [req, resp](JobCoordinator& c) { return c.CancelJob(*req, resp); });
}

grpc::ServerUnaryReactor* CoordinatorService::RegisterWorker(
    grpc::CallbackServerContext* ctx, const RegisterWorkerRequest* req,
    RegisterWorkerResponse* resp) {
  return Serial(ctx, [req, resp](JobCoordinator& c) {
    return c.RegisterWorker(*req, resp);
  });
}

grpc::ServerUnaryReactor* CoordinatorService::Heartbeat(
    grpc::CallbackServerContext* ctx, const HeartbeatRequest* req,
    HeartbeatResponse* resp) {
  return Inline(ctx,
                [&](JobCoordinator& c) { return c.Heartbeat(*req, resp); });
}

grpc::ServerUnaryReactor* CoordinatorService::ScaleJob(
    grpc::CallbackServerContext* ctx, const ScaleJobRequest* req,
    ScaleJobResponse* resp) {
  // May wait on the shards (the membership change).
  return Serial(
      ctx, [req, resp](JobCoordinator& c) { return c.ScaleJob(*req, resp); });
}

grpc::ServerUnaryReactor* CoordinatorService::Unregister(
    grpc::CallbackServerContext* ctx, const UnregisterRequest* req,
    UnregisterResponse* resp) {
  // May wait on the shards (the membership change), like RegisterWorker.
  return Serial(
      ctx, [req, resp](JobCoordinator& c) { return c.Unregister(*req, resp); });
}

grpc::ServerUnaryReactor* CoordinatorService::GetDataPlan(
    grpc::CallbackServerContext* ctx, const GetDataPlanRequest* req,
    GetDataPlanResponse* resp) {
  // A new segment waits on the shards (the membership change).
  return Serial(ctx, [req, resp](JobCoordinator& c) {
    return c.GetDataPlan(*req, resp);
  });
}

grpc::ServerUnaryReactor* CoordinatorService::GetAssignment(
    grpc::CallbackServerContext* ctx, const GetAssignmentRequest* req,
    GetAssignmentResponse* resp) {
  absl::StatusOr<JobCoordinator*> c = Ready(ctx);
  if (!c.ok()) return Finish(ctx, c.status());
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  (*c)->GetAssignment(*req, resp, [reactor](absl::Status s) {
    reactor->Finish(ToGrpcStatus(s));
  });
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::ReportProgress(
    grpc::CallbackServerContext* ctx, const ProgressReport* req,
    ProgressReportResponse* resp) {
  return Serial(ctx, [req, resp](JobCoordinator& c) {
    return c.ReportProgress(*req, resp);
  });
}

grpc::ServerUnaryReactor* CoordinatorService::GetHistory(
    grpc::CallbackServerContext* ctx, const GetHistoryRequest* req,
    GetHistoryResponse* resp) {
  return Inline(ctx,
                [&](JobCoordinator& c) { return c.GetHistory(*req, resp); });
}

grpc::ServerUnaryReactor* CoordinatorService::StartTrace(
    grpc::CallbackServerContext* ctx, const StartTraceRequest* req,
    StartTraceResponse* resp) {
  return Inline(ctx,
                [&](JobCoordinator& c) { return c.StartTrace(*req, resp); });
}

grpc::ServerUnaryReactor* CoordinatorService::UploadTrace(
    grpc::CallbackServerContext* ctx, const UploadTraceRequest* req,
    UploadTraceResponse* /*resp*/) {
  return Inline(ctx, [&](JobCoordinator& c) { return c.UploadTrace(*req); });
}

grpc::ServerUnaryReactor* CoordinatorService::GetTrace(
    grpc::CallbackServerContext* ctx, const GetTraceRequest* req,
    GetTraceResponse* resp) {
  return Inline(ctx, [&](JobCoordinator& c) { return c.GetTrace(*req, resp); });
}

grpc::ServerUnaryReactor* CoordinatorService::GetShardAddresses(
    grpc::CallbackServerContext* ctx, const ShardAddressesRequest* req,
    ShardAddressesResponse* resp) {
  absl::StatusOr<JobCoordinator*> c = Ready(ctx);
  if (!c.ok()) return Finish(ctx, c.status());
  ShardDirectory* directory;
  {
    absl::MutexLock lock(&mu_);
    directory = directory_;
  }
  if (directory == nullptr) {
    return Finish(ctx, absl::UnavailableError("shard addresses not known"));
  }
  ShardDirectory::Snapshot now = directory->Current();
  if (req->job_id().empty()) {
    (*c)->RedirectFailedShards(&now.addresses);
  } else if (absl::Status st =
                 (*c)->RedirectFailedShards(req->job_id(), &now.addresses);
             !st.ok()) {
    return Finish(ctx, st);
  }
  for (std::string& a : now.addresses) resp->add_addresses(std::move(a));
  for (std::string& p : now.problems) resp->add_problems(std::move(p));
  return Finish(ctx, absl::OkStatus());
}

}  // namespace ps
