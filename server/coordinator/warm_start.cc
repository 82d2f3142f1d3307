#include "server/coordinator/warm_start.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "core/npz_reader.h"
#include "server/coordinator/placement.h"

namespace ps {
namespace {

std::string ShapeText(const TensorSpec& t) {
  return absl::StrCat("[", absl::StrJoin(t.shape(), ", "), "]");
}

absl::Status FromJobError(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("init.from_job: ", what));
}

// Each tensor of `spec` is in `source` with its shape, and the other way
// round (the job takes the source's placement).
absl::Status SameTensors(const JobSpec& spec, const JobSpec& source,
                         const std::string& job) {
  absl::flat_hash_map<std::string, const TensorSpec*> theirs;
  for (const TensorSpec& t : source.tensors()) theirs[t.name()] = &t;
  for (const TensorSpec& t : spec.tensors()) {
    auto it = theirs.find(t.name());
    if (it == theirs.end()) {
      return FromJobError(absl::StrCat("tensor \"", t.name(), "\" (shape ",
                                       ShapeText(t), ") is not in ", job));
    }
    if (ShapeText(t) != ShapeText(*it->second)) {
      return FromJobError(absl::StrCat("tensor \"", t.name(), "\": shape ",
                                       ShapeText(t), " in the job, ",
                                       ShapeText(*it->second), " in ", job));
    }
    theirs.erase(it);
  }
  if (!theirs.empty()) {
    return FromJobError(absl::StrCat(job, " has tensor \"",
                                     theirs.begin()->first,
                                     "\", which this job lacks"));
  }
  return absl::OkStatus();
}

// spec.replication k > 1: each chunk of `placement` (the source's, one
// copy each) gets k - 1 backups on the next shards of the job's ring, its
// shards ascending, as PlaceChunks places them.
absl::Status AddBackups(const JobSpec& spec, Placement* placement) {
  const uint32_t k = std::max<uint32_t>(spec.replication(), 1);
  if (k == 1) return absl::OkStatus();
  const std::vector<uint32_t> ring = ShardSet(spec, placement->num_shards());
  if (k > ring.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replication: ", k, " copies need ", k, " shards; the job takes its ",
        "source's ", ring.size(), " (init.from_job)"));
  }
  for (ChunkPlacement& c : *placement->mutable_chunks()) {
    const auto at = std::find(ring.begin(), ring.end(), c.shard());
    if (at == ring.end()) {
      return FromJobError(absl::StrCat("chunk ", c.chunk_id(), " is on shard ",
                                       c.shard(),
                                       ", not among the source's "
                                       "shards"));
    }
    c.clear_backups();
    for (uint32_t j = 1; j < k; ++j) {
      c.add_backups(ring[(at - ring.begin() + j) % ring.size()]);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckFromFile(const JobSpec& spec) {
  if (!spec.init().has_from_file()) return absl::OkStatus();
  const std::string& path = spec.init().from_file();
  auto error = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("init.from_file: ", what));
  };
  if (path.empty()) return error("empty; name an .npz file");
  if (spec.init().optimizer_state()) {
    return error(
        absl::StrCat(path,
                     ": init.optimizer_state needs init.from_job (an .npz file "
                     "holds parameters only)"));
  }
  absl::StatusOr<std::vector<NpyArray>> arrays = ReadNpzFile(path);
  if (!arrays.ok()) return error(arrays.status().message());
  absl::Status match = MatchTensors(*arrays, spec.tensors(), path).status();
  if (!match.ok()) return error(match.message());
  return absl::OkStatus();
}

absl::Status ResolveFromJob(JobTable& jobs, uint32_t kept, JobSpec* spec,
                            Placement* placement) {
  if (!spec->init().has_from_job()) return absl::OkStatus();
  const std::string& name = spec->init().from_job();
  const JobTable::Job* source = jobs.FindByIdOrName(name);
  if (source == nullptr) {
    return FromJobError(absl::StrCat("no job \"", name, "\""));
  }
  const std::string job =
      absl::StrCat("job ", source->id(), " \"", source->status.name(), "\"");
  if (source->status.state() != SUCCEEDED) {
    return FromJobError(absl::StrCat(
        job, " is ", JobState_Name(source->status.state()),
        ": only a SUCCEEDED job's final parameters can start another"));
  }
  const std::vector<JobTable::Job*> done = jobs.SucceededNewestFirst();
  size_t rank = 0;
  while (rank < done.size() && done[rank] != source) ++rank;
  if (rank >= kept || source->dropped) {
    return FromJobError(absl::StrCat(
        job, " has left the shards (PsdConfig.succeeded_jobs_kept = ", kept,
        " newest SUCCEEDED jobs are kept); use init.from_file with its "
        "export"));
  }
  const JobSpec& theirs = source->status.spec();
  if (theirs.replication() > 1) {
    // Each shard would copy the chunks of the placement's primaries; after
    // a failover the copy there may be one left behind (a shard failed or
    // still rejoining when the source ended keeps an older state, or none).
    return FromJobError(absl::StrCat(
        job, " has replication ", theirs.replication(),
        ": a failover may have left an older copy on a chunk's first shard; "
        "export it (psctl export) and use init.from_file"));
  }
  PS_RETURN_IF_ERROR(SameTensors(*spec, theirs, job));
  if (theirs.partition_bytes() != spec->partition_bytes()) {
    return FromJobError(absl::StrCat(
        "partition_bytes is ", spec->partition_bytes(), ", ", job, "'s ",
        theirs.partition_bytes(), ": the job takes its chunks as they are"));
  }
  if (spec->init().optimizer_state() &&
      theirs.optimizer().kind() != spec->optimizer().kind()) {
    return FromJobError(
        absl::StrCat("optimizer_state: the optimizer is ",
                     OptimizerKind_Name(spec->optimizer().kind()), ", ", job,
                     "'s ", OptimizerKind_Name(theirs.optimizer().kind())));
  }
  // The chunks stay where the source's are, so the spec names the source's
  // shards (a later psctl scale reasons from it): moved or drained, they
  // need not be the first `shards` the new spec asked for.
  const bool asked = spec->shards() != 0 || spec->shard_ids_size() > 0;
  if (asked &&
      (spec->shards() != theirs.shards() ||
       !std::equal(spec->shard_ids().begin(), spec->shard_ids().end(),
                   theirs.shard_ids().begin(), theirs.shard_ids().end()))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shards: the job takes ", job, "'s chunks where they are (shards ",
        theirs.shards(), theirs.shard_ids_size() > 0 ? ", shard_ids [" : "",
        absl::StrJoin(theirs.shard_ids(), ", "),
        theirs.shard_ids_size() > 0 ? "]" : "",
        "); leave shards and shard_ids unset, or move it after the submit "
        "(psctl scale)"));
  }
  spec->set_shards(theirs.shards());
  *spec->mutable_shard_ids() = theirs.shard_ids();
  spec->mutable_init()->set_from_job(source->id());
  *placement = source->status.placement();
  return AddBackups(*spec, placement);
}

}  // namespace ps
