#include "server/internal/registration.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "core/checkpoint_gate.h"
#include "core/chunking.h"
#include "core/init.h"
#include "core/table_spec.h"
#include "core/wire_format.h"
#include "google/protobuf/util/message_differencer.h"

namespace ps {
namespace internal {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

absl::Status Prefixed(absl::string_view prefix, const absl::Status& st) {
  return absl::Status(st.code(), absl::StrCat(prefix, st.message()));
}

// req.num_workers, or spec.num_workers when 0 (they must agree when both
// are set, or req.num_workers is the spec's rank slots: max_workers).
absl::StatusOr<uint32_t> ResolveNumWorkers(const RegisterJobRequest& req) {
  const uint32_t in_spec = req.spec().num_workers();
  const uint32_t slots = std::max(in_spec, req.spec().max_workers());
  if (req.num_workers() != 0 && in_spec != 0 && req.num_workers() != in_spec &&
      req.num_workers() != slots) {
    return Invalid(
        "num_workers",
        absl::StrCat(req.num_workers(), " differs from spec.num_workers ",
                     in_spec, " and spec.max_workers ",
                     req.spec().max_workers()));
  }
  const uint32_t n = req.num_workers() != 0 ? req.num_workers() : in_spec;
  if (n == 0) return Invalid("num_workers", "must be >= 1");
  return n;
}

// The consistency mode and its parameters (job.num_workers set).
absl::Status ApplyConsistency(const ConsistencySpec& cs, Job& job) {
  job.mode = cs.mode() == CONSISTENCY_UNSPECIFIED ? BSP : cs.mode();
  if (job.mode != BSP && job.mode != ASP && job.mode != SSP) {
    return Invalid("spec.consistency.mode",
                   absl::StrCat("unknown mode ", static_cast<int>(cs.mode())));
  }
  if (cs.backup_workers() != 0 && job.mode != BSP) {
    return Invalid("spec.consistency.backup_workers",
                   "only BSP uses backup workers");
  }
  if (cs.backup_workers() >= job.num_workers) {
    return Invalid("spec.consistency.backup_workers",
                   absl::StrCat("must be < num_workers (", job.num_workers,
                                "), got ", cs.backup_workers()));
  }
  if (cs.staleness() != 0 && job.mode != SSP) {
    return Invalid("spec.consistency.staleness",
                   "only SSP uses a staleness bound");
  }
  job.backup_workers = cs.backup_workers();
  job.staleness_bound = cs.staleness();
  job.deadline_ms = cs.step_deadline_ms() == 0 ? kDefaultStepDeadlineMs
                                               : cs.step_deadline_ms();
  return absl::OkStatus();
}

// Placement entry `i` (`c`) must be the chunk the spec cuts (`w`).
absl::Status CheckPlacedChunk(int i, const ChunkPlacement& c,
                              const ChunkPlacement& w, uint32_t num_shards,
                              uint32_t copies) {
  if (c.chunk_id() != w.chunk_id() || c.tensor() != w.tensor() ||
      c.index() != w.index() || c.offset() != w.offset() ||
      c.length() != w.length()) {
    return Invalid(
        absl::StrCat("placement.chunks[", i, "]"),
        absl::StrFormat("is (id %d, %s[%d], offset %d, length %d), the spec "
                        "cuts (id %d, %s[%d], offset %d, length %d)",
                        c.chunk_id(), c.tensor(), c.index(), c.offset(),
                        c.length(), w.chunk_id(), w.tensor(), w.index(),
                        w.offset(), w.length()));
  }
  if (c.shard() >= num_shards) {
    return Invalid(absl::StrCat("placement.chunks[", i, "].shard"),
                   absl::StrCat(c.shard(), " >= num_shards ", num_shards));
  }
  const int backups = static_cast<int>(std::max(copies, 1u)) - 1;
  if (c.backups_size() != backups) {
    return Invalid(absl::StrCat("placement.chunks[", i, "].backups"),
                   absl::StrCat(c.backups_size(), " backups, spec.replication ",
                                copies, " needs ", backups));
  }
  for (int j = 0; j < c.backups_size(); ++j) {
    const uint32_t b = c.backups(j);
    const bool repeated =
        b == c.shard() ||
        std::find(c.backups().begin(), c.backups().begin() + j, b) !=
            c.backups().begin() + j;
    if (b >= num_shards || repeated) {
      return Invalid(absl::StrCat("placement.chunks[", i, "].backups[", j, "]"),
                     absl::StrCat(b,
                                  ": out of range or a shard already "
                                  "holding the chunk"));
    }
  }
  return absl::OkStatus();
}

// Whether shard `shard_id` holds a copy of `c` (primary or backup).
bool HoldsCopy(const ChunkPlacement& c, uint32_t shard_id) {
  return c.shard() == shard_id ||
         std::find(c.backups().begin(), c.backups().end(), shard_id) !=
             c.backups().end();
}

}  // namespace

uint64_t ChunkBytes(const Job& job, uint64_t length) {
  // Parameters, their encoding shared by replies, optimizer state.
  uint64_t bytes = 2 * length * sizeof(float) +
                   job.optimizer->StateBytes(length) + sizeof(Chunk);
  // BSP keeps one gradient per worker until the quorum arrives.
  if (job.mode == BSP) bytes += uint64_t{job.num_workers} * length * 4;
  if (job.delta_pulls) bytes += ChangeLog::Bytes(length, job.num_workers);
  return bytes;
}

namespace {

// Checks the placement against the spec's chunks; sets job.bytes and
// `local_count` for shard `shard_id`.
absl::Status CheckPlacement(const Placement& placement, uint32_t shard_id,
                            Job& job, int* local_count) {
  if (placement.num_shards() <= shard_id) {
    return Invalid(
        "placement.num_shards",
        absl::StrCat(placement.num_shards(), ", but this is shard ", shard_id));
  }
  const std::vector<ChunkPlacement> want = CutIntoChunks(job.spec);
  if (static_cast<size_t>(placement.chunks_size()) != want.size()) {
    return Invalid(
        "placement.chunks",
        absl::StrCat(placement.chunks_size(),
                     " chunks, but the spec's tensors cut into ", want.size()));
  }
  job.bytes = 0;
  *local_count = 0;
  for (int i = 0; i < placement.chunks_size(); ++i) {
    const ChunkPlacement& c = placement.chunks(i);
    PS_RETURN_IF_ERROR(CheckPlacedChunk(i, c, want[i], placement.num_shards(),
                                        job.spec.replication()));
    if (!HoldsCopy(c, shard_id)) continue;
    ++*local_count;
    job.bytes += ChunkBytes(job, c.length());
  }
  return absl::OkStatus();
}

void ApplyCheckpointSpec(const JobSpec& spec, bool can_checkpoint, Job& job) {
  const CheckpointSpec& ck = spec.checkpoint();
  job.every_steps = ck.every_steps();
  job.every_seconds = ck.every_seconds();
  job.checkpointing =
      can_checkpoint && (ck.every_steps() > 0 || ck.every_seconds() > 0);
  job.gate_replies = job.checkpointing && StepAnswersAwaitCheckpoint(spec);
  // The tables' answers wait for their checkpoints too.
  if (job.gate_replies && job.tables != nullptr) job.tables->GateAnswers();
  job.tables_full_every = TablesFullEvery(ck);
  // A replicated job's copies of its tables are taken as snapshots too
  // (table_replicas.h), which would start an increment's interval of
  // changes over: its table checkpoints are all full.
  if (job.replicated) job.tables_full_every = 1;
  // Incremental checkpoints: the tables track the rows they change.
  if (job.checkpointing && job.tables != nullptr && job.tables_full_every > 1) {
    job.tables->TrackChanges();
  }
}

}  // namespace

// The job's sparse tables on this shard, checked as at submit (a spec that
// bypassed the coordinator gets the same errors).
absl::Status NewTables(const JobSpec& spec, uint32_t shard_id, Job& job) {
  if (spec.tables_size() == 0) return absl::OkStatus();
  const std::vector<std::string> problems = TableProblems(spec);
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("spec.", problems[0]));
  }
  PS_ASSIGN_OR_RETURN(job.tables, TablesOfShard(job, shard_id));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<JobTables>> TablesOfShard(const Job& job,
                                                         uint32_t shard_id) {
  JobSpec filled = job.spec;
  for (TableSpec& t : *filled.mutable_tables()) ApplyTableDefaults(&t);
  filled.set_name(job.id);
  absl::StatusOr<std::unique_ptr<JobTables>> tables = JobTables::Create(
      filled, {.shard_id = shard_id,
               .num_shards = job.placement.num_shards(),
               .num_workers = job.num_workers,
               .split_buffer_bytes = sparse_internal::kDefaultSplitBufferBytes,
               .owners = {job.placement.table_shards().begin(),
                          job.placement.table_shards().end()}});
  if (!tables.ok()) return Prefixed("spec.", tables.status());
  return tables;
}

absl::StatusOr<std::shared_ptr<Job>> NewJob(const RegisterJobRequest& req,
                                            uint32_t shard_id,
                                            bool can_checkpoint,
                                            int* local_count) {
  if (req.job_id().empty()) return Invalid("job_id", "must not be empty");
  PS_ASSIGN_OR_RETURN(const uint32_t num_workers, ResolveNumWorkers(req));
  auto job = std::make_shared<Job>();
  job->id = req.job_id();
  job->spec = req.spec();
  job->placement = req.placement();
  job->num_workers = num_workers;
  if (req.spec().lr_rule() == LR_RULE_LINEAR) {
    job->linear_lr_workers = std::max(1u, req.spec().num_workers());
  }
  job->registration = req;
  job->registration.set_num_workers(num_workers);

  absl::StatusOr<std::unique_ptr<Optimizer>> opt =
      Optimizer::Create(req.spec().optimizer());
  if (!opt.ok()) return Prefixed("spec.", opt.status());
  job->optimizer = *std::move(opt);
  PS_RETURN_IF_ERROR(ApplyConsistency(req.spec().consistency(), *job));
  job->wire_format = req.spec().wire().format();
  job->delta_pulls = WantsDeltaPulls(req.spec());
  if (!IsKnownWireFormat(job->wire_format)) {
    return Invalid("spec.wire.format",
                   absl::StrCat(static_cast<int>(job->wire_format),
                                " is not a known wire format"));
  }
  if (absl::Status st = ValidateTensors(req.spec()); !st.ok()) {
    return Prefixed("spec.", st);
  }
  job->replicated = req.spec().replication() > 1;
  if (req.joining() && !job->replicated) {
    return Invalid("joining", absl::StrCat("only a replicated job's copies "
                                           "rejoin; spec.replication is ",
                                           req.spec().replication()));
  }
  PS_RETURN_IF_ERROR(
      CheckPlacement(req.placement(), shard_id, *job, local_count));
  PS_RETURN_IF_ERROR(NewTables(req.spec(), shard_id, *job));
  ApplyCheckpointSpec(req.spec(), can_checkpoint, *job);
  return job;
}

absl::Status InitChunks(uint32_t shard_id, Job& job) {
  absl::flat_hash_map<std::string, const TensorSpec*> tensors;
  for (const TensorSpec& t : job.spec.tensors()) tensors[t.name()] = &t;
  const std::vector<uint8_t> all_active(job.num_workers, 1);
  job.local.assign(job.placement.chunks_size(), -1);
  for (const ChunkPlacement& c : job.placement.chunks()) {
    if (!HoldsCopy(c, shard_id)) continue;
    ChunkState s = NewChunkState(c, *job.optimizer, job.num_workers);
    if (absl::Status st = InitValues(job.spec.seed(), *tensors[c.tensor()],
                                     c.offset(), absl::MakeSpan(s.values));
        !st.ok()) {
      return Prefixed("spec.", st);
    }
    job.local[c.chunk_id()] = static_cast<int32_t>(job.chunks.size());
    job.chunks.push_back(std::make_shared<Chunk>(std::move(s), all_active));
  }
  return absl::OkStatus();
}

void InitJobState(Job& job, const std::vector<uint8_t>& active) {
  if (job.delta_pulls) {
    for (const std::shared_ptr<Chunk>& c : job.chunks) {
      absl::MutexLock l(&c->mu);
      c->changes.Start(c->state.version, c->length, job.num_workers);
    }
  }
  InitWorkerState(job, active);
}

void InitWorkerState(Job& job, const std::vector<uint8_t>& active) {
  job.counters.workers = std::make_unique<WorkerCounters[]>(job.num_workers);
  job.is_active = std::make_unique<std::atomic<bool>[]>(job.num_workers);
  uint32_t count = 0;
  for (uint32_t r = 0; r < job.num_workers; ++r) {
    job.is_active[r].store(active[r] != 0);
    count += active[r] != 0;
  }
  job.active_count.store(count);
  absl::MutexLock l(&job.waits.mu);
  job.waits.active = active;
  job.waits.clock.assign(job.num_workers, 0);
}

std::string RegistrationDiff(const Job& existing, const Job& job) {
  std::string diff;
  bool same;
  {
    google::protobuf::util::MessageDifferencer d;
    d.ReportDifferencesToString(&diff);
    d.IgnoreField(JobSpec::descriptor()->FindFieldByName("shards"));
    same = d.Compare(existing.spec, job.spec);
    if (!same) diff = "spec: " + diff;
  }
  if (same) {
    google::protobuf::util::MessageDifferencer d;
    d.ReportDifferencesToString(&diff);
    same = d.Compare(existing.placement, job.placement);
    if (!same) diff = "placement: " + diff;
  }
  if (same && existing.num_workers != job.num_workers) {
    same = false;
    diff = absl::StrCat("num_workers: ", existing.num_workers, " -> ",
                        job.num_workers);
  }
  if (same) return "";
  return diff.substr(0, diff.find('\n'));
}

}  // namespace internal
}  // namespace ps
