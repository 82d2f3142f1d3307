// ValidateJobSpec's replication checks (job_validation.h:
// ReplicationProblems): what replicas cover so far, docs/OPERATIONS.md
// "Replication".
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/coordinator/job_validation.h"

namespace ps {
namespace {

// The shards the job uses: shard_ids, else the first `shards`, else all.
std::vector<uint32_t> JobShards(const JobSpec& spec, uint32_t num_shards) {
  if (spec.shard_ids_size() > 0) {
    return {spec.shard_ids().begin(), spec.shard_ids().end()};
  }
  const uint32_t n = spec.shards() > 0 ? spec.shards() : num_shards;
  std::vector<uint32_t> out(std::min(n, num_shards));
  for (uint32_t i = 0; i < out.size(); ++i) out[i] = i;
  return out;
}

}  // namespace

std::vector<std::string> ReplicationProblems(const JobSpec& spec,
                                             const ValidationContext& ctx) {
  std::vector<std::string> p;
  const auto add = [&p](const char* field, const std::string& why) {
    p.push_back(absl::StrCat(field, ": ", why));
  };
  const uint32_t k = spec.replication();
  if (k > kMaxReplication) {
    add("replication",
        absl::StrFormat("must be in [1, %d], got %d", kMaxReplication, k));
    return p;
  }
  if (spec.shards() > ctx.num_shards) {
    add("shards", absl::StrFormat("%d, but the cluster has %d", spec.shards(),
                                  ctx.num_shards));
  }
  if (k <= 1) return p;
  const bool listed = spec.shard_ids_size() > 0;  // backups among them
  const uint32_t used = listed ? spec.shard_ids_size() : spec.shards();
  if (used != 0 && k > used) {
    add("replication",
        absl::StrFormat("%d copies need %d shards, %s %d", k, k,
                        listed ? "shard_ids names" : "shards is", used));
  }
  if (used != 0 && k > used) return p;  // said above
  // Live among the job's own shards: a failed shard elsewhere does not
  // matter, and one of the job's does even when the cluster has others.
  std::vector<uint32_t> live;
  for (uint32_t s : JobShards(spec, ctx.num_shards)) {
    if (std::find(ctx.failed_shards.begin(), ctx.failed_shards.end(), s) ==
        ctx.failed_shards.end()) {
      live.push_back(s);
    }
  }
  if (k > live.size()) {
    add("replication",
        absl::StrFormat("%d copies need %d live shards; of the job's shards "
                        "%d %s live ([%s])",
                        k, k, live.size(), live.size() == 1 ? "is" : "are",
                        absl::StrJoin(live, ", ")));
  }
  // Sparse tables are replicated in every mode: each BSP step, or ASP/SSP
  // push, is forwarded (server/internal/table_replicas.h).
  // init.from_file: every shard reads the file into each copy it holds,
  // primary or backup, so the copies agree from version 0 (a copy that
  // rejoins after a failover takes the live copies' state instead).
  // init.from_job: the primaries' shards hold the source's chunks and
  // forward them to the backups before any answer (warm_start.h); the job
  // takes the source's shards, checked again once resolved
  // (ResolveFromJob).
  return p;
}

}  // namespace ps
