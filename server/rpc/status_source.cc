#include "server/rpc/status_source.h"

#include <utility>

#include "absl/time/clock.h"
#include "common/grpc_status.h"

namespace ps {

PsdStatusSource::PsdStatusSource(Shard* local, uint32_t local_shard_id,
                                 const Security* security,
                                 absl::Duration stats_deadline)
    : local_(local),
      local_shard_id_(local_shard_id),
      security_(security),
      stats_deadline_(stats_deadline) {}

void PsdStatusSource::SetCoordinator(
    JobCoordinator* coordinator, const std::vector<std::string>& addresses) {
  std::vector<std::shared_ptr<ParameterServer::Stub>> stubs;
  for (const std::string& a : addresses) {
    stubs.push_back(ParameterServer::NewStub(security_->NewChannel(a)));
  }
  absl::MutexLock lock(&mu_);
  coordinator_ = coordinator;
  addresses_ = addresses;
  stubs_ = std::move(stubs);
}

absl::StatusOr<JobCoordinator*> PsdStatusSource::Coordinator() {
  absl::MutexLock lock(&mu_);
  if (coordinator_ == nullptr) {
    return absl::UnavailableError(
        "coordinator starting: waiting for every shard's address");
  }
  return coordinator_;
}

absl::Status PsdStatusSource::ListJobs(ListJobsResponse* response) {
  absl::StatusOr<JobCoordinator*> c = Coordinator();
  if (!c.ok()) return c.status();
  return (*c)->ListJobs(ListJobsRequest(), response);
}

absl::Status PsdStatusSource::GetHistory(const GetHistoryRequest& request,
                                         GetHistoryResponse* response) {
  absl::StatusOr<JobCoordinator*> c = Coordinator();
  if (!c.ok()) return c.status();
  return (*c)->GetHistory(request, response);
}

std::vector<StatusSource::ShardAnswer> PsdStatusSource::Shards() {
  std::vector<std::string> addresses;
  std::vector<std::shared_ptr<ParameterServer::Stub>> stubs;
  {
    absl::MutexLock lock(&mu_);
    addresses = addresses_;
    stubs = stubs_;
  }
  std::vector<ShardAnswer> answers(addresses.size());
  for (uint32_t shard = 0; shard < addresses.size(); ++shard) {
    ShardAnswer& a = answers[shard];
    a.shard = shard;
    a.address = addresses[shard];
    if (shard == local_shard_id_) {
      local_->Stats(StatsRequest(), &a.stats);
      continue;
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + stats_deadline_));
    security_->Authorize(&ctx);
    a.status =
        FromGrpcStatus(stubs[shard]->Stats(&ctx, StatsRequest(), &a.stats));
  }
  return answers;
}

}  // namespace ps
