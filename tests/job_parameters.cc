#include "tests/job_parameters.h"

#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/security.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "proto/ps.grpc.pb.h"
#include "tests/subprocess.h"
#include "worker/client/ps_client.h"

namespace ps {

absl::StatusOr<JobStatus> ReadJobStatus(const LocalCluster& cluster,
                                        const std::string& job, bool* unknown) {
  PS_ASSIGN_OR_RETURN(CommandResult r,
                      cluster.Psctl({"status", job, "--json"}));
  if (r.exit_code != 0) {
    if (unknown != nullptr) *unknown = absl::StrContains(r.err, "unknown job");
    return absl::UnavailableError(absl::StrCat("psctl status ", job, ": exit ",
                                               r.exit_code, ": ", r.err));
  }
  JobStatus status;
  if (!google::protobuf::util::JsonStringToMessage(r.out, &status).ok()) {
    return absl::InternalError("psctl status printed no JobStatus: " + r.out);
  }
  return status;
}

bool JobEnded(const JobStatus& status) {
  return status.state() == SUCCEEDED || status.state() == FAILED ||
         status.state() == CANCELLED;
}

absl::StatusOr<JobStats> ReadShardJobStats(const std::string& address,
                                           const std::string& job) {
  Security security;
  std::unique_ptr<ParameterServer::Stub> stub =
      ParameterServer::NewStub(security.NewChannel(address));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  StatsRequest req;
  req.set_job_id(job);
  ShardStats stats;
  grpc::Status s = stub->Stats(&context, req, &stats);
  if (!s.ok()) return absl::UnavailableError(s.error_message());
  if (stats.job_stats_size() != 1) {
    return absl::NotFoundError(
        absl::StrCat("shard at ", address, " has no job ", job));
  }
  return stats.job_stats(0);
}

absl::Status ReadServedVersions(const std::string& address,
                                const std::string& job,
                                uint64_t placement_epoch,
                                std::map<uint32_t, uint64_t>* versions) {
  Security security;
  std::unique_ptr<ParameterServer::Stub> stub =
      ParameterServer::NewStub(security.NewChannel(address));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  PullRequest req;
  req.set_job_id(job);
  req.set_placement_epoch(placement_epoch);
  PullResponse resp;
  grpc::Status s = stub->Pull(&context, req, &resp);
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("pull from ", address, ": ", s.error_message()));
  }
  for (const ChunkData& d : resp.parameters()) {
    if (!versions->emplace(d.chunk_id(), d.version()).second) {
      return absl::FailedPreconditionError(
          absl::StrCat("chunk ", d.chunk_id(), " served twice"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<JobParameters> ReadJobParameters(const LocalCluster& cluster,
                                                const std::string& job,
                                                int shards) {
  std::vector<std::string> addresses;
  for (int i = 0; i < shards; ++i) {
    PS_ASSIGN_OR_RETURN(
        std::string addr,
        WaitForFile(absl::StrCat(cluster.dir(), "/s", i, ".addr"),
                    absl::Seconds(1)));
    addresses.push_back(std::move(addr));
  }
  return ReadJobParameters(cluster, job, addresses);
}

absl::StatusOr<JobParameters> ReadJobParameters(
    const LocalCluster& cluster, const std::string& job,
    const std::vector<std::string>& addresses) {
  JobParameters out;
  PS_ASSIGN_OR_RETURN(out.status, ReadJobStatus(cluster, job));
  Assignment a;
  a.set_job_id(job);
  *a.mutable_spec() = out.status.spec();
  *a.mutable_placement() = out.status.placement();
  a.set_num_workers(out.status.spec().num_workers());
  for (const std::string& address : addresses) a.add_shard_addresses(address);
  Security security;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<PsClient> client,
                      PsClient::Create(PsClientOptions(), a, &security));
  out.values.resize(client->num_parameters());
  PS_RETURN_IF_ERROR(
      client->Pull(out.status.progress().step(), absl::MakeSpan(out.values)));
  return out;
}

}  // namespace ps
