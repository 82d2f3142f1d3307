// JobTables: the replicated jobs' side (job_tables.h, "Replicated jobs";
// the copies and their forwards are server/internal/table_replicas.h).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "core/float_bytes.h"
#include "core/sparse_ids.h"
#include "server/sparse/job_tables.h"

namespace ps {

using sparse_internal::Answer;
using sparse_internal::TablePushes;
using sparse_internal::WaiterPtr;

void JobTables::SetStepSink(StepSink sink) {
  // A push applying now finishes before the order changes.
  absl::MutexLock in_order(&order_mu_);
  absl::MutexLock l(&mu_);
  ordered_.store(sink != nullptr && mode_ != BSP);
  step_sink_ = std::move(sink);
}

void JobTables::GateOnReplicas() {
  absl::MutexLock l(&mu_);
  replica_gated_ = true;
}

void JobTables::SetReplicatedVersion(uint64_t version) {
  std::vector<WaiterPtr> ready;
  {
    absl::MutexLock l(&mu_);
    if (version == replicated_) return;
    replicated_ = version;
    CollectReadyLocked(&ready);
  }
  for (auto& w : ready) Answer(*tables_, *w);
}

ReplicaTableStep JobTables::ForwardOf(
    const std::vector<const TablePushes*>& order, float scale) const {
  ReplicaTableStep out;
  out.set_scale(scale);
  for (size_t k = 0; k < tables_->size(); ++k) {
    size_t ids = 0;
    for (const TablePushes* p : order) ids += p->ids[k].size();
    if (ids == 0) continue;
    SparseRows* rows = out.add_rows();
    rows->set_table(tables_->at(k).spec.name());
    std::string* id_bytes = rows->mutable_ids();
    id_bytes->reserve(ids * sizeof(uint64_t));
    // Concatenated in rank order: TableSet::Apply sums a row pushed several
    // times in this order, so the backup's single push sums the same way.
    for (const TablePushes* p : order) {
      id_bytes->append(reinterpret_cast<const char*>(p->ids[k].data()),
                       p->ids[k].size() * sizeof(uint64_t));
      std::string values;
      EncodeFloats(p->grads[k], &values);
      rows->mutable_values()->append(values);
    }
  }
  return out;
}

absl::StatusOr<TablePushes> JobTables::ForwardedPushes(
    const ReplicaTableStep& step) const {
  TablePushes pushes;
  pushes.ids.resize(tables_->size());
  pushes.grads.resize(tables_->size());
  std::vector<bool> seen(tables_->size(), false);
  if (!std::isfinite(step.scale())) {
    return absl::InvalidArgumentError("steps.scale: not a finite number");
  }
  for (int i = 0; i < step.rows_size(); ++i) {
    const SparseRows& r = step.rows(i);
    const std::string field = absl::StrCat("steps.rows[", i, "]");
    const sparse_internal::Table* t = tables_->Find(r.table());
    if (t == nullptr || seen[tables_->IndexOf(r.table())]) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".table: \"", r.table(), "\" unknown or named twice"));
    }
    const size_t k = tables_->IndexOf(r.table());
    seen[k] = true;
    const size_t dim = t->spec.dim();
    const size_t n = r.ids().size() / sizeof(uint64_t);
    if (r.ids().size() % sizeof(uint64_t) != 0 ||
        r.values().size() != n * dim * sizeof(float)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": ids and values do not make whole rows of ",
                       dim, " floats"));
    }
    std::vector<uint64_t>& ids = pushes.ids[k];
    ids.resize(n);
    std::memcpy(ids.data(), r.ids().data(), r.ids().size());
    const uint64_t bound = t->rows->options().id_bound;
    for (uint64_t id : ids) {
      if ((bound != 0 && id >= bound) ||
          ShardForId(id, where_.num_shards) != where_.shard_id) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".ids: ", id, " is not a row of shard ",
                         where_.shard_id, " of table ", r.table()));
      }
    }
    std::vector<float>& grads = pushes.grads[k];
    grads.resize(n * dim);
    DecodeFloats(r.values(), absl::MakeSpan(grads));
    for (float g : grads) {
      if (!std::isfinite(g)) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".values: NaN or infinite"));
      }
    }
    pushes.bytes += r.ids().size() + r.values().size();
  }
  return pushes;
}

absl::Status JobTables::ApplyForwardedStep(const ReplicaTableStep& step) {
  PS_ASSIGN_OR_RETURN(TablePushes pushes, ForwardedPushes(step));
  if (mode_ != BSP && step.worker() >= where_.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("steps.worker: ", step.worker(), " is out of range [0, ",
                     where_.num_workers, ") for job ", job_id_));
  }
  absl::WriterMutexLock no_applies(&apply_mu_);
  absl::MutexLock l(&mu_);
  PS_RETURN_IF_ERROR(closed_);
  const uint64_t version = barrier_.version();
  if (step.version_before() < version) return absl::OkStatus();
  if (step.version_before() > version) {
    return absl::OutOfRangeError(absl::StrCat(
        "steps.version_before: ", step.version_before(),
        " needs the tables of shard ", where_.shard_id, " at that version; ",
        "this copy holds ", version, ": send the state"));
  }
  if (mode_ != BSP) {
    // One push, as the primary applied it (ApplyClaimed): at the worker's
    // step, then counted, then the eviction that followed it there.
    PS_RETURN_IF_ERROR(tables_->Apply({&pushes}, step.scale(), step.step()));
    barrier_.CountForwarded(step.worker(), step.step());
    if (step.evict_at() > 0) tables_->EvictExpired(step.evict_at());
    return absl::OkStatus();
  }
  PS_RETURN_IF_ERROR(tables_->Apply({&pushes}, step.scale(), version));
  // Whatever the copy held for this step (a restored primary's buffered
  // pushes) is done with, as on the primary.
  barrier_.EndStep(true);
  tables_->EvictExpired(barrier_.version());
  return absl::OkStatus();
}

}  // namespace ps
