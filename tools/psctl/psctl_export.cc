#include "tools/psctl/psctl_export.h"

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "core/wire_format.h"
#include "proto/ps.grpc.pb.h"
#include "server/checkpoint.h"
#include "tools/psctl/psctl_export_tables.h"

namespace ps {
namespace psctl {
namespace {

using ChunkValues = std::map<uint32_t, std::vector<float>>;

// Pull replies stay under the 4 MiB message limit: chunks are at most
// 3 MiB (JobSpec.partition_bytes), so at most this many float bytes are
// asked for per call, and at least one chunk.
constexpr uint64_t kPullBytesPerCall = 3 << 20;
constexpr int kDefaultExportTimeoutSeconds = 60;

// What one export gathered: the job's spec and placement, its chunks.
struct Gathered {
  std::string job_id;
  JobSpec spec;
  Placement placement;
  ChunkValues chunks;
  std::string source;  // for the summary line
  // A running job's: how its tables' rows are reached.
  std::optional<Connection> connection;
  std::vector<std::string> addresses;
  absl::Duration timeout = absl::Seconds(kDefaultExportTimeoutSeconds);
};

// Decodes a pull reply's chunk into `chunks`, checking it is one asked for.
absl::Status TakeChunk(const ChunkData& c, const Placement& placement,
                       ChunkValues* chunks) {
  if (c.chunk_id() >= static_cast<uint32_t>(placement.chunks_size()) ||
      c.has_base_version()) {
    return absl::InternalError(
        absl::StrCat("shard answered chunk ", c.chunk_id(), " unasked"));
  }
  const uint64_t length = placement.chunks(c.chunk_id()).length();
  const std::string field = absl::StrCat("parameters[", c.chunk_id(), "]");
  PayloadProblem problem;
  PS_RETURN_IF_ERROR(
      CheckPayload(c.format(), c.data(), c.indices(), length, field, &problem));
  std::vector<float>& v = (*chunks)[c.chunk_id()];
  v.assign(length, 0.0f);
  DecodePayload(c.format(), c.data(), c.indices(), absl::MakeSpan(v));
  return absl::OkStatus();
}

// Pulls every chunk of the running job from its shards, a few chunks per
// call; each call has `timeout`. The pulls are worker 0's (any rank may
// read): under delta pulls this only makes that worker's next reply dense,
// as the shard then last answered it a version it does not hold.
absl::Status PullChunks(const Connection& c,
                        const std::vector<std::string>& addresses,
                        absl::Duration timeout, Gathered* g) {
  std::map<uint32_t, std::vector<PullRequest>> calls;  // by shard
  std::map<uint32_t, uint64_t> bytes;  // of each shard's last request
  for (const ChunkPlacement& p : g->placement.chunks()) {
    std::vector<PullRequest>& reqs = calls[p.shard()];
    if (reqs.empty() || bytes[p.shard()] + 4 * p.length() > kPullBytesPerCall) {
      reqs.emplace_back().set_job_id(g->job_id);
      bytes[p.shard()] = 0;
    }
    reqs.back().add_chunk_ids(p.chunk_id());
    bytes[p.shard()] += 4 * p.length();
  }
  for (const auto& [shard, reqs] : calls) {
    if (shard >= addresses.size()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the coordinator knows ", addresses.size(), " shards, job \"",
          g->job_id, "\" is placed on shard ", shard));
    }
    auto stub =
        ParameterServer::NewStub(c.security.NewChannel(addresses[shard]));
    for (const PullRequest& req : reqs) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
      c.security.Authorize(&ctx);
      PullResponse resp;
      absl::Status st = FromGrpcStatus(stub->Pull(&ctx, req, &resp));
      if (!st.ok()) {
        return absl::Status(st.code(),
                            absl::StrCat("pull from shard ", shard, " at ",
                                         addresses[shard], ": ", st.message()));
      }
      for (const ChunkData& d : resp.parameters()) {
        PS_RETURN_IF_ERROR(TakeChunk(d, g->placement, &g->chunks));
      }
    }
  }
  return absl::OkStatus();
}

// A running job: its spec and placement from the coordinator, its chunks
// from the shards.
absl::Status GatherFromShards(const Args& a, const std::string& job_id,
                              Gathered* g) {
  absl::Duration timeout = absl::Seconds(kDefaultExportTimeoutSeconds);
  if (Has(a, "--timeout")) {
    double s = 0;
    if (!absl::SimpleAtod(FlagOr(a, "--timeout", ""), &s) || s <= 0) {
      return absl::InvalidArgumentError("--timeout: expected seconds > 0");
    }
    timeout = absl::Seconds(s);
  }
  g->timeout = timeout;
  PS_ASSIGN_OR_RETURN(g->connection, Connect(a, /*need_cluster=*/false));
  const Connection& c = *g->connection;
  CoordinatorClient client(c);
  GetJobRequest req;
  req.set_job_id(job_id);
  JobStatus job;
  PS_RETURN_IF_ERROR(client.Call(&Coordinator::Stub::GetJob, req, &job));
  if (job.state() != RUNNING && job.state() != SUCCEEDED) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job \"", job_id, "\" is ", JobState_Name(job.state()),
        ": only a running or SUCCEEDED job's parameters are on the shards "
        "(they drop a failed or cancelled one); for stopped shards use "
        "--from-checkpoint DIR"));
  }
  // The job's: a failed shard's chunks are read where it holds their
  // backups.
  ShardAddressesRequest where;
  where.set_job_id(job_id);
  ShardAddressesResponse shards;
  PS_RETURN_IF_ERROR(
      client.Call(&Coordinator::Stub::GetShardAddresses, where, &shards));
  g->job_id = job_id;
  g->spec = job.spec();
  g->placement = job.placement();
  g->source = "the shards";
  g->addresses.assign(shards.addresses().begin(), shards.addresses().end());
  absl::Status pulled = PullChunks(c, g->addresses, timeout, g);
  if (!pulled.ok() && job.state() == SUCCEEDED) {
    // The likely cause: it is older than PsdConfig.succeeded_jobs_kept.
    return absl::Status(
        pulled.code(),
        absl::StrCat(pulled.message(),
                     " (a SUCCEEDED job stays on the shards while it is "
                     "among the newest PsdConfig.succeeded_jobs_kept; "
                     "its checkpoints go with it)"));
  }
  return pulled;
}

// The job whose checkpoints `dir` holds: `job_id` when given (it must be
// there), else the only one.
absl::StatusOr<std::string> PickJob(const std::string& dir,
                                    const std::vector<uint32_t>& shards,
                                    const std::string& job_id) {
  std::set<std::string> jobs;
  for (uint32_t s : shards) {
    PS_ASSIGN_OR_RETURN(auto store, CheckpointStore::OpenForReading(dir, s));
    PS_ASSIGN_OR_RETURN(std::vector<std::string> ids, store->ListJobs());
    jobs.insert(ids.begin(), ids.end());
  }
  const std::string held = jobs.empty() ? "none" : absl::StrJoin(jobs, ", ");
  if (job_id.empty() && jobs.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint directory ", dir, " holds the checkpoints of ",
                     jobs.size(), " jobs (", held, "): name one as JOB"));
  }
  if (job_id.empty()) return *jobs.begin();
  if (jobs.count(job_id) == 0) {
    return absl::NotFoundError(absl::StrCat(
        "checkpoint directory ", dir, " holds no checkpoint of job \"", job_id,
        "\" (it holds jobs: ", held, ")"));
  }
  return job_id;
}

// Stopped shards: each shard's newest intact checkpoint of the job in `dir`.
// Shards whose checkpoints stand at different steps are reported on `err`.
absl::Status GatherFromCheckpoints(const std::string& dir,
                                   const std::string& job_id_arg,
                                   std::ostream& err, Gathered* g) {
  PS_RETURN_IF_ERROR(CheckpointStore::OpenForReading(dir, 0).status());
  PS_ASSIGN_OR_RETURN(std::vector<uint32_t> shards,
                      CheckpointStore::ShardsIn(dir));
  PS_ASSIGN_OR_RETURN(g->job_id, PickJob(dir, shards, job_id_arg));
  std::map<uint64_t, std::vector<uint32_t>> steps;  // step -> shards
  for (uint32_t s : shards) {
    PS_ASSIGN_OR_RETURN(auto store, CheckpointStore::OpenForReading(dir, s));
    absl::StatusOr<CheckpointStore::Loaded> l = store->LoadLatest(g->job_id);
    if (absl::IsNotFound(l.status())) continue;  // another job's shard
    if (!l.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job \"", g->job_id, "\", shard ", s, ": ", l.status().message()));
    }
    JobCheckpoint& ck = l->checkpoint;
    if (g->placement.chunks_size() == 0) {
      g->spec = ck.registration.spec();
      g->placement = ck.registration.placement();
    }
    steps[ck.step].push_back(s);
    for (ChunkState& chunk : ck.chunks) {
      g->chunks[chunk.placement.chunk_id()] = std::move(chunk.values);
    }
  }
  if (steps.size() > 1) {
    err << "psctl export: warning: the shards' checkpoints stand at different "
           "steps:";
    for (const auto& [step, at] : steps) {
      err << " step " << step << " (shards " << absl::StrJoin(at, ",") << ")";
    }
    err << "\n";
  }
  g->source = absl::StrCat("the checkpoints in ", dir);
  return absl::OkStatus();
}

// Where the gathered job's table rows come from.
RowSource RowsOf(const Gathered& g, const std::string& dir) {
  if (g.connection.has_value()) {
    return ShardRowSource(*g.connection, g.job_id, g.addresses, g.timeout);
  }
  return CheckpointRowSource(dir, g.job_id);
}

// The .npz at `path`: the dense tensors, the tables' rows (or, with
// --tables-dir, a directory of them), the spec. Nothing is left under
// either name on an error.
absl::Status WriteExport(const Args& a, const std::string& path,
                         const Gathered& g, TablesWritten* tables) {
  PS_ASSIGN_OR_RETURN(std::vector<NpyArray> arrays,
                      AssembleTensors(g.spec, g.placement, g.chunks));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<NpzStreamWriter> w,
                      NpzStreamWriter::Create(path));
  for (const NpyArray& array : arrays) PS_RETURN_IF_ERROR(w->Add(array));
  arrays.clear();
  const RowSource rows = RowsOf(g, FlagOr(a, "--from-checkpoint", ""));
  const uint32_t num_shards = g.placement.num_shards();
  const std::string tables_dir = FlagOr(a, "--tables-dir", "");
  if (!Has(a, "--tables-dir")) {
    PS_RETURN_IF_ERROR(WriteTables(g.spec, num_shards, rows, *w, tables));
  } else if (tables_dir.empty()) {
    return absl::InvalidArgumentError("--tables-dir: expected a directory");
  } else {
    PS_RETURN_IF_ERROR(
        WriteTablesDir(g.spec, num_shards, rows, tables_dir, tables));
  }
  PS_RETURN_IF_ERROR(w->Add(NpyArray::Bytes("__job_spec__", ToJson(g.spec))));
  absl::Status st = w->Commit();
  if (!st.ok() && !tables_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(tables_dir, ec);
  }
  return st;
}

}  // namespace

absl::StatusOr<std::vector<NpyArray>> AssembleTensors(
    const JobSpec& spec, const Placement& placement,
    const ChunkValues& chunks) {
  std::map<std::string, std::vector<const ChunkPlacement*>> by_tensor;
  for (const ChunkPlacement& p : placement.chunks()) {
    by_tensor[p.tensor()].push_back(&p);
  }
  std::vector<NpyArray> arrays;
  for (const TensorSpec& t : spec.tensors()) {
    uint64_t elements = 1;
    for (uint64_t d : t.shape()) elements *= d;
    std::vector<float> values(elements);
    uint64_t filled = 0;
    for (const ChunkPlacement* p : by_tensor[t.name()]) {
      auto it = chunks.find(p->chunk_id());
      const std::string where =
          absl::StrCat("tensor \"", t.name(), "\" chunk ", p->index(),
                       " (shard ", p->shard(), ")");
      if (it == chunks.end()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": missing"));
      }
      if (it->second.size() != p->length() ||
          p->offset() + p->length() > elements) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": ", it->second.size(),
                         " values, the placement says ", p->length()));
      }
      std::copy(it->second.begin(), it->second.end(),
                values.begin() + p->offset());
      filled += p->length();
    }
    if (filled != elements) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor \"", t.name(), "\": its chunks hold ", filled,
                       " of ", elements, " values"));
    }
    arrays.push_back(NpyArray::Float32(
        t.name(), std::vector<uint64_t>(t.shape().begin(), t.shape().end()),
        values));
  }
  return arrays;
}

int Export(const Args& a, std::ostream& out, std::ostream& err) {
  const std::string path = FlagOr(a, "--out", "");
  const std::string dir = FlagOr(a, "--from-checkpoint", "");
  const bool from_checkpoint = Has(a, "--from-checkpoint");
  if (path.empty() || a.positional.size() > 1 ||
      (a.positional.empty() && !from_checkpoint)) {
    err << "psctl export: expected JOB (optional with --from-checkpoint DIR) "
           "and -o FILE.npz\n";
    return kExitUsage;
  }
  if (path.size() < 4 || path.substr(path.size() - 4) != ".npz") {
    err << "psctl export: " << path
        << ": psctl writes .npz only; for a PyTorch state_dict (.pt), "
           "TorchScript (.ts) or ONNX (.onnx) of a built-in model run: "
           "python3 -m psclient.export_model JOB -o "
        << path << " (docs/TUTORIAL.md)\n";
    return kExitUsage;
  }
  const std::string job_id = a.positional.empty() ? "" : a.positional[0];
  Gathered g;
  absl::Status st = from_checkpoint
                        ? GatherFromCheckpoints(dir, job_id, err, &g)
                        : GatherFromShards(a, job_id, &g);
  TablesWritten tables;
  if (st.ok()) st = WriteExport(a, path, g, &tables);
  if (!st.ok()) {
    err << "psctl export: " << st.message() << "\n";
    return ExitCodeFor(st);
  }
  out << "exported " << g.spec.tensors_size() << " tensors";
  if (g.spec.tables_size() > 0) {
    out << " and " << g.spec.tables_size() << " sparse tables (" << tables.rows
        << " rows)";
  }
  out << " of job " << g.job_id << " from " << g.source << " to " << path;
  if (Has(a, "--tables-dir")) out << " and " << FlagOr(a, "--tables-dir", "");
  out << "\n";
  return kExitOk;
}

}  // namespace psctl
}  // namespace ps
