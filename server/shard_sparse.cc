// Shard: the sparse tables' entry points (server/shard.h; the rules are in
// server/sparse/job_tables.h, the replicated copies in
// server/internal/table_replicas.h).
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "server/internal/checkpointer.h"
#include "server/internal/job.h"
#include "server/internal/reasons.h"
#include "server/internal/registration.h"
#include "server/internal/replica_apply.h"
#include "server/internal/replicator.h"
#include "server/internal/table_replicas.h"
#include "server/internal/validation.h"
#include "server/internal/waits.h"
#include "server/shard.h"

namespace ps {

absl::Status Shard::AttachTableReplicas(const JobPtr& job) const {
  if (!job->replicated || job->tables == nullptr) return absl::OkStatus();
  const internal::TableReplicas::Options options{
      .deadline = options_.replicate_deadline,
      .max_deadline = options_.replicate_max_deadline,
      .retry = options_.replicate_retry};
  internal::Job& j = *job;
  PS_ASSIGN_OR_RETURN(
      job->table_replicas,
      internal::TableReplicas::Create(
          options, job->id, job->placement, job->spec.replication(),
          replica_view_, job->tables.get(),
          [&j](uint32_t shard) { return internal::TablesOfShard(j, shard); }));
  job->table_replicas->SetSender(replicator_->sender());
  std::weak_ptr<internal::Job> weak = job;
  job->table_replicas->SetOnFenced([weak](const absl::Status& why) {
    if (JobPtr held = weak.lock()) internal::CloseJob(*held, why);
  });
  job->table_replicas->SetOwner(weak);
  return absl::OkStatus();
}

absl::StatusOr<JobTables*> Shard::TablesFor(internal::Job& job,
                                            int64_t table_shard) const {
  const uint32_t self = options_.shard_id;
  const uint32_t owner =
      table_shard >= 0 ? static_cast<uint32_t>(table_shard) : self;
  if (job.table_replicas != nullptr) {
    absl::StatusOr<JobTables*> t = job.table_replicas->Serving(owner);
    if (!t.ok() && absl::IsInvalidArgument(t.status())) {
      job.rejected.Add(internal::kSparseBadRequest);
    }
    return t;
  }
  if (owner != self) {
    job.rejected.Add(internal::kSparseBadRequest);
    return absl::InvalidArgumentError(absl::StrCat(
        "table_shard: ", owner, " is not this shard (", self, ") and job \"",
        job.id, "\" keeps no copies of other shards' rows"));
  }
  return job.tables.get();
}

void Shard::SparseExchange(const SparseExchangeRequest& req,
                           SparseExchangeResponse* resp,
                           std::function<void(absl::Status)> done) {
  struct Call {
    SparseRequestIn in;
    SparseReplyOut out;
  };
  auto call = std::make_shared<Call>();
  call->in = SparseRequestFromProto(req);
  resp->Clear();
  SparseExchange(&call->in, &call->out,
                 [call, resp, done = std::move(done)](absl::Status s) {
                   if (s.ok()) SparseReplyToProto(call->in, call->out, resp);
                   done(std::move(s));
                 });
}

void Shard::SparseExchange(SparseRequestIn* req, SparseReplyOut* resp,
                           std::function<void(absl::Status)> done) {
  const int64_t start_ns = absl::GetCurrentTimeNanos();
  *resp = SparseReplyOut();
  absl::StatusOr<JobPtr> job = FindJob(req->job_id);
  if (!job.ok()) return done(job.status());
  // Rows routed by another placement (Placement.table_shards): ABORTED for
  // an older one (the worker follows the new), UNAVAILABLE for one this
  // shard has not committed yet.
  if (absl::Status st = internal::ValidatePlacementEpoch(
          **job, options_.shard_id, req->placement_epoch);
      !st.ok()) {
    return done(std::move(st));
  }
  if ((*job)->tables == nullptr) {
    (*job)->rejected.Add(internal::kNoTables);
    return done(absl::InvalidArgumentError(
        absl::StrCat("job_id: job \"", req->job_id,
                     "\" has no sparse tables (JobSpec.tables)")));
  }
  // The job stays alive while the call waits: `done` holds a reference
  // (and the job holds every copy of table rows).
  absl::StatusOr<JobTables*> chosen = TablesFor(**job, req->table_shard);
  if (!chosen.ok()) return done(chosen.status());
  JobTables* tables = *chosen;
  // Only the shard's own rows are checkpointed.
  const bool own = tables == (*job)->tables.get();
  // Read now: `req` may be gone once `done` ran.
  const bool push = req->push;
  const JobPtr keep = *job;
  tables->Exchange(
      req, resp,
      [this, resp, start_ns, own, job = *std::move(job),
       done = std::move(done)](absl::Status s) mutable {
        // Before `done`, while `resp` is valid.
        if (s.ok()) {
          if (own) checkpointer_->AfterExchange(job, resp->version);
          job->counters.request_ns[internal::kSparseExchangeMethod].Record(
              static_cast<uint64_t>(absl::GetCurrentTimeNanos() - start_ns));
        }
        if (absl::IsInvalidArgument(s)) {
          job->rejected.Add(internal::kSparseBadRequest);
        } else if (absl::IsFailedPrecondition(s)) {
          job->rejected.Add(internal::kInactiveWorker);
        } else if (absl::IsResourceExhausted(s)) {
          job->rejected.Add(internal::kSparseOverBudget);
        }
        done(std::move(s));
      });
  if (!own) return;
  // Counted once the push is buffered or applied (or refused), so that a
  // snapshot which saw the count holds the push.
  if (push) checkpointer_->CountSparsePush(*keep);
  // Gated answers wait for the checkpoint this step makes due, so it is
  // scheduled here, not when the answer goes out (a shard without dense
  // chunks has no other trigger).
  if (push && keep->gate_replies) {
    checkpointer_->AfterExchange(keep, tables->version());
  }
}

absl::Status Shard::ReplicateTables(internal::Job& job,
                                    const ReplicateRequest& req) {
  if (job.table_replicas == nullptr || req.chunks_size() > 0) {
    job.rejected.Add(internal::kBadReplica);
    return absl::InvalidArgumentError(absl::StrCat(
        "tables: job \"", job.id, "\" keeps no replicated tables on shard ",
        options_.shard_id, ", or the forward also carries chunks"));
  }
  PS_RETURN_IF_ERROR(internal::CheckForwardEpoch(job, req));
  PS_RETURN_IF_ERROR(internal::CheckPlacementEpoch(job, req));
  const absl::Status s = job.table_replicas->Apply(req);
  if (!s.ok() && !absl::IsUnavailable(s) && !absl::IsOutOfRange(s)) {
    job.rejected.Add(internal::kBadReplica);
  }
  return s;
}

}  // namespace ps
