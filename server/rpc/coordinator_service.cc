#include "server/rpc/coordinator_service.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"

namespace ps {

GrpcShardControl::GrpcShardControl(const std::vector<std::string>& addresses,
                                   const Security* security,
                                   uint32_t local_shard_id, Shard* local,
                                   absl::Duration deadline)
    : security_(security),
      local_shard_id_(local_shard_id),
      local_(local),
      deadline_(deadline) {
  for (const std::string& a : addresses) {
    stubs_.push_back(ParameterServer::NewStub(security->NewChannel(a)));
  }
}

std::unique_ptr<grpc::ClientContext> GrpcShardControl::NewContext() const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + deadline_));
  ctx->set_wait_for_ready(
      true);  // a shard that is still starting is waited for
  security_->Authorize(ctx.get());
  return ctx;
}

absl::Status GrpcShardControl::RegisterJob(uint32_t shard,
                                           const RegisterJobRequest& request) {
  if (shard == local_shard_id_) {
    RegisterJobResponse resp;
    return local_->RegisterJob(request, &resp);
  }
  if (shard >= stubs_.size())
    return absl::InvalidArgumentError(absl::StrCat("shard ", shard));
  RegisterJobResponse resp;
  return FromGrpcStatus(
      stubs_[shard]->RegisterJob(NewContext().get(), request, &resp));
}

absl::Status GrpcShardControl::DropJob(uint32_t shard,
                                       const std::string& job_id) {
  DropJobRequest req;
  req.set_job_id(job_id);
  if (shard == local_shard_id_) return local_->DropJob(req);
  if (shard >= stubs_.size())
    return absl::InvalidArgumentError(absl::StrCat("shard ", shard));
  DropJobResponse resp;
  return FromGrpcStatus(stubs_[shard]->DropJob(NewContext().get(), req, &resp));
}

absl::Status GrpcShardControl::SetMembership(
    uint32_t shard, const SetMembershipRequest& request) {
  if (shard == local_shard_id_) return local_->SetMembership(request);
  if (shard >= stubs_.size())
    return absl::InvalidArgumentError(absl::StrCat("shard ", shard));
  SetMembershipResponse resp;
  return FromGrpcStatus(
      stubs_[shard]->SetMembership(NewContext().get(), request, &resp));
}

void CoordinatorService::SetCoordinator(JobCoordinator* coordinator) {
  absl::MutexLock lock(&mu_);
  coordinator_ = coordinator;
}

JobCoordinator* CoordinatorService::Ready(grpc::CallbackServerContext* ctx,
                                          absl::Status* rejected) {
  *rejected = security_->CheckToken(*ctx);
  if (!rejected->ok()) return nullptr;
  absl::MutexLock lock(&mu_);
  if (coordinator_ == nullptr) {
    *rejected = absl::UnavailableError(
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

// A call that may block on shard RPCs: run on the executor.
#define PS_COORDINATOR_SERIAL(Method, ctx, req, resp)        \
  absl::Status rejected;                                     \
  JobCoordinator* c = Ready(ctx, &rejected);                 \
  if (c == nullptr) return Finish(ctx, rejected);            \
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor(); \
  executor_.Schedule([c, req, resp, reactor] {               \
    reactor->Finish(ToGrpcStatus(c->Method(*req, resp)));    \
  });                                                        \
  return reactor

// A call that never blocks: run inline.
#define PS_COORDINATOR_INLINE(Method, ctx, req, resp) \
  absl::Status rejected;                              \
  JobCoordinator* c = Ready(ctx, &rejected);          \
  if (c == nullptr) return Finish(ctx, rejected);     \
  return Finish(ctx, c->Method(*req, resp))

grpc::ServerUnaryReactor* CoordinatorService::SubmitJob(
    grpc::CallbackServerContext* ctx, const SubmitJobRequest* req,
    SubmitJobResponse* resp) {
  absl::Status rejected;
  JobCoordinator* c = Ready(ctx, &rejected);
  if (c == nullptr) return Finish(ctx, rejected);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  executor_.Schedule([c, req, resp, reactor] {
    absl::Status s = c->SubmitJob(*req, resp);
    // A rejected spec is an answer, not a failed call: gRPC drops the
    // response body on errors, and the client needs every problem listed.
    if (!s.ok() && resp->problems_size() > 0) s = absl::OkStatus();
    reactor->Finish(ToGrpcStatus(s));
  });
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::GetJob(
    grpc::CallbackServerContext* ctx, const GetJobRequest* req,
    JobStatus* resp) {
  PS_COORDINATOR_INLINE(GetJob, ctx, req, resp);
}

grpc::ServerUnaryReactor* CoordinatorService::ListJobs(
    grpc::CallbackServerContext* ctx, const ListJobsRequest* req,
    ListJobsResponse* resp) {
  PS_COORDINATOR_INLINE(ListJobs, ctx, req, resp);
}

grpc::ServerUnaryReactor* CoordinatorService::CancelJob(
    grpc::CallbackServerContext* ctx, const CancelJobRequest* req,
    CancelJobResponse* resp) {
  PS_COORDINATOR_SERIAL(CancelJob, ctx, req, resp);
}

grpc::ServerUnaryReactor* CoordinatorService::RegisterWorker(
    grpc::CallbackServerContext* ctx, const RegisterWorkerRequest* req,
    RegisterWorkerResponse* resp) {
  PS_COORDINATOR_SERIAL(RegisterWorker, ctx, req, resp);
}

grpc::ServerUnaryReactor* CoordinatorService::Heartbeat(
    grpc::CallbackServerContext* ctx, const HeartbeatRequest* req,
    HeartbeatResponse* resp) {
  PS_COORDINATOR_INLINE(Heartbeat, ctx, req, resp);
}

grpc::ServerUnaryReactor* CoordinatorService::GetAssignment(
    grpc::CallbackServerContext* ctx, const GetAssignmentRequest* req,
    GetAssignmentResponse* resp) {
  absl::Status rejected;
  JobCoordinator* c = Ready(ctx, &rejected);
  if (c == nullptr) return Finish(ctx, rejected);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  c->GetAssignment(*req, resp, [reactor](absl::Status s) {
    reactor->Finish(ToGrpcStatus(s));
  });
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::ReportProgress(
    grpc::CallbackServerContext* ctx, const ProgressReport* req,
    ProgressReportResponse* resp) {
  PS_COORDINATOR_SERIAL(ReportProgress, ctx, req, resp);
}

}  // namespace ps
