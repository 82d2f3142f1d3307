// row_cache_replay: replays one rank's ctr-synthetic (or criteo-tsv) batches
// through the worker's hot-row cache (worker/client/hot_row_cache.h) as the
// CtrTrainer reads them, without shards or a model, and prints how many of
// the rows read the cache answers, per policy, cache size and staleness.
// The hit rate depends only on the ids of the batches, not on the rows'
// values, so this measures LRU against LFU on the job's own data in
// seconds; AUC needs the real job (docs/SPARSE.md "Hot-row cache").
//
//   row_cache_replay --job=configs/jobs/ctr_synthetic.pbtxt --steps=2000
//       --staleness=1,2,4,8 --cache_mb=4,16,64 --policy=lru,lfu
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "common/text_proto.h"
#include "proto/job.pb.h"
#include "worker/client/hot_row_cache.h"
#include "worker/model/id_dedup.h"
#include "worker/trainer/ctr_data.h"

ABSL_FLAG(std::string, job, "configs/jobs/ctr_synthetic.pbtxt",
          "job spec (text proto) of a ctr model");
ABSL_FLAG(uint32_t, rank, 0, "the worker replayed");
ABSL_FLAG(uint64_t, steps, 0, "steps replayed (0 = the whole job)");
ABSL_FLAG(std::string, staleness, "1,2,4,8", "max_row_staleness values");
ABSL_FLAG(std::string, cache_mb, "64", "row_cache_bytes values, in MiB");
ABSL_FLAG(std::string, policy, "lru,lfu", "eviction policies");

namespace ps {
namespace {

absl::StatusOr<std::vector<uint64_t>> ParseList(const std::string& flag,
                                                const std::string& text) {
  std::vector<uint64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    uint64_t v;
    if (!absl::SimpleAtoi(part, &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": \"", part, "\" is not a number"));
    }
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<std::vector<RowCachePolicy>> ParsePolicies(
    const std::string& text) {
  std::vector<RowCachePolicy> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    if (part == "lru") {
      out.push_back(RowCachePolicy::kLru);
    } else if (part == "lfu") {
      out.push_back(RowCachePolicy::kLfu);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--policy: \"", part, "\" is not lru or lfu"));
    }
  }
  return out;
}

// The unique ids of each step's batch, as CtrReplica::Prepare finds them.
absl::StatusOr<std::vector<std::vector<uint64_t>>> LoadIds(const JobSpec& job,
                                                           uint32_t rank,
                                                           uint64_t steps) {
  CtrDataOptions o;
  o.rank = rank;
  o.num_workers = job.num_workers();
  o.test_set = false;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<CtrDataSource> data,
                      CreateCtrDataSource(job, o));
  const uint64_t total = data->steps_per_epoch() * job.data().epochs();
  if (steps == 0 || steps > total) steps = total;
  std::vector<std::vector<uint64_t>> ids(steps);
  CtrBatch batch;
  IdDedup dedup;
  for (uint64_t t = 0; t < steps; ++t) {
    PS_RETURN_IF_ERROR(data->TrainBatch(t, &batch));
    PS_RETURN_IF_ERROR(dedup.DedupSingle(batch.ids));
    ids[t].assign(dedup.unique_ids().begin(), dedup.unique_ids().end());
  }
  return ids;
}

// Batch t's rows are read at version t (the start's pull) or with step
// t - 1's push (version t), as CtrTrainer reads them.
absl::StatusOr<HotRowCacheStats> Replay(
    const std::vector<std::vector<uint64_t>>& ids, uint32_t dim,
    const HotRowCacheOptions& options) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<HotRowCache> cache,
                      HotRowCache::Create(options));
  std::vector<float> rows;
  RowCacheMisses misses;
  for (uint64_t t = 0; t < ids.size(); ++t) {
    rows.resize(ids[t].size() * dim);
    cache->Read(t, ids[t], absl::MakeSpan(rows), &misses);
    cache->Complete(t, misses, absl::MakeSpan(rows));
  }
  return cache->stats();
}

absl::Status Main() {
  JobSpec job;
  PS_RETURN_IF_ERROR(ParseTextProtoFile(absl::GetFlag(FLAGS_job), &job));
  if (job.tables_size() == 0 || job.num_workers() == 0) {
    return absl::InvalidArgumentError("--job: needs a table and num_workers");
  }
  const uint32_t dim = job.tables(0).dim();
  PS_ASSIGN_OR_RETURN(std::vector<uint64_t> staleness,
                      ParseList("staleness", absl::GetFlag(FLAGS_staleness)));
  PS_ASSIGN_OR_RETURN(std::vector<uint64_t> cache_mb,
                      ParseList("cache_mb", absl::GetFlag(FLAGS_cache_mb)));
  PS_ASSIGN_OR_RETURN(std::vector<RowCachePolicy> policies,
                      ParsePolicies(absl::GetFlag(FLAGS_policy)));
  PS_ASSIGN_OR_RETURN(
      std::vector<std::vector<uint64_t>> ids,
      LoadIds(job, absl::GetFlag(FLAGS_rank), absl::GetFlag(FLAGS_steps)));
  uint64_t read = 0;
  for (const auto& step : ids) read += step.size();
  std::cout << absl::StrFormat("steps %d, rows read %d (%.0f per step)\n",
                               ids.size(), read,
                               static_cast<double>(read) / ids.size());
  std::cout << "policy cache_mb staleness rows_pulled pulled_share hit_rate "
               "evictions\n";
  for (RowCachePolicy policy : policies) {
    for (uint64_t mb : cache_mb) {
      for (uint64_t s : staleness) {
        HotRowCacheOptions o;
        o.dim = dim;
        o.max_staleness = s;
        o.capacity_bytes = mb << 20;
        o.policy = policy;
        PS_ASSIGN_OR_RETURN(HotRowCacheStats st, Replay(ids, dim, o));
        std::cout << absl::StrFormat(
            "%s %d %d %d %.4f %.4f %d\n",
            policy == RowCachePolicy::kLru ? "lru" : "lfu", mb, s, st.misses,
            static_cast<double>(st.misses) / read,
            static_cast<double>(st.hits) / read, st.evictions);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::Status s = ps::Main();
  if (!s.ok()) {
    std::cerr << "row_cache_replay: " << s.message() << "\n";
    return 1;
  }
  return 0;
}
