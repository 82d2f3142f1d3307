#include "server/sparse/internal/table_set.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "common/defaults.h"
#include "common/status_macros.h"
#include "core/sparse_ids.h"
#include "server/optimizer.h"  // ScopedFlushDenormals

namespace ps {
namespace sparse_internal {
namespace {

// TTL eviction scans a table this many times per evict_after_steps.
constexpr uint64_t kEvictionScansPerTtl = 16;

// A table's name into its initializer's seed, the same everywhere: FNV-1a's
// loop, with tests/checksum.h's offset basis (not core/init.cc's Fnv1a, whose
// basis differs: switching would change every table's initial rows).
uint64_t NameHash(absl::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

RowOptimizerKind RowKind(OptimizerKind kind) {
  switch (kind) {
    case SGD:
      return RowOptimizerKind::kSgd;
    case ADAGRAD:
      return RowOptimizerKind::kAdagrad;
    case ADAM:
      return RowOptimizerKind::kAdam;
    case FTRL:
      return RowOptimizerKind::kFtrl;
    default:
      return RowOptimizerKind::kUnspecified;
  }
}

RowOptimizerOptions RowOptions(const OptimizerSpec& o) {
  RowOptimizerOptions r;
  r.kind = RowKind(o.kind());
  r.learning_rate = o.learning_rate();
  r.weight_decay = o.weight_decay();
  r.initial_accumulator = o.initial_accumulator();
  if (o.has_epsilon()) r.epsilon = o.epsilon();
  if (o.has_beta1()) r.beta1 = o.beta1();
  if (o.has_beta2()) r.beta2 = o.beta2();
  if (o.has_ftrl_beta()) r.ftrl_beta = o.ftrl_beta();
  r.l1 = o.l1();
  r.l2 = o.l2();
  return r;
}

RowInitializer Initializer(const TableSpec& t, uint64_t job_seed) {
  RowInitializer init;
  switch (t.init().kind()) {
    case CONSTANT:
      init.kind = RowInitializer::Kind::kConstant;
      init.value = t.init().value();
      break;
    case UNIFORM:
      init.kind = RowInitializer::Kind::kUniform;
      init.scale = t.init().scale();
      break;
    case NORMAL:
      init.kind = RowInitializer::Kind::kNormal;
      init.scale = t.init().scale();
      break;
    default:
      init.kind = RowInitializer::Kind::kZeros;
  }
  init.seed = MixId64(job_seed ^ NameHash(t.name()));
  return init;
}

// Prefixes a table's or optimizer's own error with the spec field it came
// from.
absl::Status InField(const absl::Status& s, absl::string_view at) {
  return absl::Status(s.code(), absl::StrCat(at, ": ", s.message()));
}

// The SparseTable options of table `ts` of a job seeded `job_seed`.
SparseTable::Options TableOptions(const TableSpec& ts,
                                  const RowOptimizer& optimizer,
                                  uint64_t job_seed) {
  SparseTable::Options o;
  o.name = ts.name();
  o.dim = ts.dim();
  o.state_floats_per_row = optimizer.StateFloatsPerRow(ts.dim());
  o.init = Initializer(ts, job_seed);
  o.id_bound = ts.num_ids();
  o.admission_count = std::max<uint32_t>(ts.admit_after(), 1);
  o.ttl_steps = ts.evict_after_steps();
  o.lru = ts.evict_lru();
  o.memory_budget_bytes = ts.memory_budget_bytes();
  o.hot_ids = ts.has_hot_ids() ? ts.hot_ids() : kDefaultTableHotIds;
  return o;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TableSet>> TableSet::Create(
    const JobSpec& spec) {
  std::unique_ptr<TableSet> set(new TableSet());
  for (int i = 0; i < spec.tables_size(); ++i) {
    const TableSpec& ts = spec.tables(i);
    const std::string at = absl::StrCat("tables[", i, "]");
    auto table = std::make_unique<Table>();
    table->spec = ts;
    absl::StatusOr<std::unique_ptr<RowOptimizer>> opt =
        RowOptimizer::Create(RowOptions(ts.optimizer()));
    if (!opt.ok()) return InField(opt.status(), at);
    table->optimizer = std::move(*opt);
    table->options = TableOptions(ts, *table->optimizer, spec.seed());
    absl::StatusOr<std::unique_ptr<SparseTable>> rows =
        SparseTable::Create(table->options);
    if (!rows.ok()) return InField(rows.status(), at);
    table->rows = std::move(*rows);
    if (!set->index_.emplace(ts.name(), set->tables_.size()).second) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.name: \"%s\" is used by another table", at, ts.name()));
    }
    set->tables_.push_back(std::move(table));
  }
  return set;
}

const Table* TableSet::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : tables_[it->second].get();
}

absl::Status TableSet::Apply(const std::vector<const TablePushes*>& pushes,
                             float scale, uint64_t step) {
  for (size_t k = 0; k < tables_.size(); ++k) {
    Table& t = *tables_[k];
    // One push is applied from its own buffers; several concatenated.
    std::vector<uint64_t> joined_ids;
    std::vector<float> joined_grads;
    absl::Span<const uint64_t> ids;
    absl::Span<const float> grads;
    if (pushes.size() == 1) {
      ids = pushes[0]->ids[k];
      grads = pushes[0]->grads[k];
    } else {
      for (const TablePushes* p : pushes) {
        joined_ids.insert(joined_ids.end(), p->ids[k].begin(), p->ids[k].end());
        joined_grads.insert(joined_grads.end(), p->grads[k].begin(),
                            p->grads[k].end());
      }
      ids = joined_ids;
      grads = joined_grads;
    }
    if (ids.empty()) continue;
    const int dim = static_cast<int>(t.spec.dim());
    std::vector<float> scaled(dim);
    const RowOptimizer& opt = *t.optimizer;
    ScopedFlushDenormals flush;
    PS_RETURN_IF_ERROR(t.rows->Push(
        ids, grads, step,
        [&](float* row, float* state, const float* grad, uint64_t) {
          const float* g = grad;
          if (scale != 1.0f) {
            for (int e = 0; e < dim; ++e) scaled[e] = grad[e] * scale;
            g = scaled.data();
          }
          opt.UpdateInFlushScope(row, state, g, dim);
        }));
  }
  return absl::OkStatus();
}

void TableSet::EvictExpired(uint64_t now) {
  for (const auto& t : tables_) {
    // A scan of the table: every T / 16 steps, so a row idle for T steps
    // goes within T + T / 16.
    const uint64_t period = std::max<uint64_t>(
        1, t->spec.evict_after_steps() / kEvictionScansPerTtl);
    if (t->spec.evict_after_steps() > 0 && now % period == 0) {
      t->rows->EvictExpired(now);
    }
  }
}

uint64_t TableSet::bytes_used() const {
  uint64_t bytes = 0;
  for (const auto& t : tables_) bytes += t->rows->bytes_used();
  return bytes;
}

std::vector<SparseTable::Snapshot> TableSet::TakeSnapshots(
    bool incremental) const {
  std::vector<SparseTable::Snapshot> snapshots;
  for (const auto& t : tables_) {
    snapshots.push_back(t->rows->TakeSnapshot(incremental));
  }
  return snapshots;
}

void TableSet::TrackChanges() {
  tracking_ = true;
  for (const auto& t : tables_) t->rows->TrackChanges();
}

absl::Status TableSet::WriteSnapshots(
    std::vector<SparseTable::Snapshot> snapshots, ByteSink& sink) const {
  for (size_t k = 0; k < tables_.size(); ++k) {
    PS_RETURN_IF_ERROR(
        tables_[k]->rows->WriteSnapshot(std::move(snapshots[k]), sink));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::unique_ptr<SparseTable>>> TableSet::ReadTables(
    ByteSource& source) const {
  std::vector<std::unique_ptr<SparseTable>> restored;
  for (const auto& t : tables_) {
    PS_ASSIGN_OR_RETURN(std::unique_ptr<SparseTable> fresh,
                        SparseTable::Create(t->options));
    PS_RETURN_IF_ERROR(fresh->Restore(source));
    restored.push_back(std::move(fresh));
  }
  return restored;
}

absl::Status TableSet::ApplyIncrements(
    std::vector<std::unique_ptr<SparseTable>>& restored, ByteSource& source,
    const SparseTable::IdFilter& accept) const {
  for (auto& table : restored) {
    PS_RETURN_IF_ERROR(table->ApplyIncrement(source, accept));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::unique_ptr<SparseTable>>> TableSet::Empty()
    const {
  std::vector<std::unique_ptr<SparseTable>> fresh;
  for (const auto& t : tables_) {
    PS_ASSIGN_OR_RETURN(std::unique_ptr<SparseTable> table,
                        SparseTable::Create(t->options));
    fresh.push_back(std::move(table));
  }
  return fresh;
}

absl::Status TableSet::SaveRowsWhere(const SparseTable::IdFilter& keep,
                                     ByteSink& sink) const {
  for (const auto& t : tables_) {
    PS_RETURN_IF_ERROR(t->rows->SaveRowsWhere(keep, sink));
  }
  return absl::OkStatus();
}

void TableSet::Replace(std::vector<std::unique_ptr<SparseTable>> rows) {
  for (size_t k = 0; k < tables_.size(); ++k) {
    tables_[k]->rows = std::move(rows[k]);
    // Its first snapshot is full (SparseTable::TrackChanges).
    if (tracking_) tables_[k]->rows->TrackChanges();
  }
}

}  // namespace sparse_internal
}  // namespace ps
