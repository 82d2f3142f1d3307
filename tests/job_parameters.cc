#include "tests/job_parameters.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/security.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "tests/subprocess.h"
#include "worker/ps_client.h"

namespace ps {

absl::StatusOr<JobParameters> ReadJobParameters(const LocalCluster& cluster,
                                                const std::string& job,
                                                int shards) {
  PS_ASSIGN_OR_RETURN(CommandResult status,
                      cluster.Psctl({"status", job, "--json"}));
  if (status.exit_code != 0) {
    return absl::InternalError(absl::StrCat(
        "psctl status ", job, ": exit ", status.exit_code, ": ", status.err));
  }
  JobParameters out;
  if (!google::protobuf::util::JsonStringToMessage(status.out, &out.status)
           .ok()) {
    return absl::InternalError("psctl status --json: not a JobStatus: " +
                               status.out);
  }
  Assignment a;
  a.set_job_id(job);
  *a.mutable_spec() = out.status.spec();
  *a.mutable_placement() = out.status.placement();
  a.set_num_workers(out.status.spec().num_workers());
  for (int i = 0; i < shards; ++i) {
    PS_ASSIGN_OR_RETURN(
        std::string addr,
        WaitForFile(absl::StrCat(cluster.dir(), "/s", i, ".addr"),
                    absl::Seconds(1)));
    a.add_shard_addresses(addr);
  }
  Security security;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<PsClient> client,
                      PsClient::Create(PsClientOptions(), a, &security));
  out.values.resize(client->num_parameters());
  PS_RETURN_IF_ERROR(
      client->Pull(out.status.progress().step(), absl::MakeSpan(out.values)));
  return out;
}

}  // namespace ps
