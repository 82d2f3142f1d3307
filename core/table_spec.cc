#include "core/table_spec.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/defaults.h"
#include "core/model_spec.h"
#include "core/optimizer_spec.h"

namespace ps {
namespace {

bool ValidTableNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' || c == '/';
}

void CheckName(const TableSpec& t, const std::string& at,
               std::vector<std::string>& p) {
  const std::string& name = t.name();
  if (name.empty() || name.size() > kMaxTableNameLength) {
    p.push_back(absl::StrFormat("%s.name: must have 1 to %d characters, got %d",
                                at, kMaxTableNameLength, name.size()));
    return;
  }
  for (char c : name) {
    if (!ValidTableNameChar(c)) {
      p.push_back(absl::StrFormat(
          "%s.name: invalid character '%s' in \"%s\" (use letters, digits, "
          "'-', '_', '.', '/')",
          at, absl::CHexEscape(std::string(1, c)), absl::CHexEscape(name)));
      return;
    }
  }
}

// A table row has no fan-in or fan-out: only the plain initializers apply.
void CheckInit(const InitSpec& init, const std::string& at,
               std::vector<std::string>& p) {
  switch (init.kind()) {
    case INIT_UNSPECIFIED:
    case ZEROS:
    case CONSTANT:
    case UNIFORM:
    case NORMAL:
      break;
    case GLOROT_UNIFORM:
    case HE_NORMAL:
      p.push_back(absl::StrCat(at, ".init.kind: ", InitKind_Name(init.kind()),
                               " needs a layer's fan-in; a table takes ZEROS, "
                               "CONSTANT, UNIFORM or NORMAL"));
      break;
    default:
      p.push_back(
          absl::StrFormat("%s.init.kind: unknown value %d", at, init.kind()));
  }
  if (!std::isfinite(init.value())) {
    p.push_back(absl::StrCat(at, ".init.value: must be finite"));
  }
  if (!std::isfinite(init.scale()) || init.scale() < 0) {
    p.push_back(absl::StrFormat(
        "%s.init.scale: must be finite and >= 0, got %g", at, init.scale()));
  }
}

// The worker-side hot-row cache (worker/client/hot_row_cache.h).
void CheckRowCache(const TableSpec& t, const std::string& at,
                   std::vector<std::string>& p) {
  if (t.max_row_staleness() > kMaxRowStaleness) {
    p.push_back(
        absl::StrFormat("%s.max_row_staleness: must be at most %d, got %d", at,
                        kMaxRowStaleness, t.max_row_staleness()));
  }
  const uint64_t row = uint64_t{t.dim()} * 4 + kRowCacheOverheadBytes;
  const uint64_t bytes = t.row_cache_bytes();
  if (bytes > kMaxRowCacheBytes || (bytes > 0 && bytes < row)) {
    p.push_back(absl::StrFormat(
        "%s.row_cache_bytes: must be 0 or in [%d (one row), %d], got %d", at,
        row, kMaxRowCacheBytes, bytes));
  }
}

void CheckTable(const TableSpec& t, const std::string& at,
                std::vector<std::string>& p) {
  CheckName(t, at, p);
  if (t.dim() < 1 || t.dim() > kMaxTableDim) {
    p.push_back(absl::StrFormat("%s.dim: must be in [1, %d], got %d", at,
                                kMaxTableDim, t.dim()));
  }
  CheckInit(t.init(), at, p);
  AppendOptimizerProblems(t.optimizer(), at + ".optimizer",
                          {SGD, ADAGRAD, ADAM, FTRL}, &p);
  if (t.optimizer().momentum() > 0 && t.optimizer().momentum() < 1 &&
      t.optimizer().kind() == SGD) {
    p.push_back(absl::StrCat(at,
                             ".optimizer.momentum: a table's SGD is lazy and "
                             "keeps no momentum; leave it 0"));
  }
  if (t.admit_after() > kMaxTableAdmitAfter) {
    p.push_back(absl::StrFormat("%s.admit_after: must be at most %d, got %d",
                                at, kMaxTableAdmitAfter, t.admit_after()));
  }
  if (t.evict_lru() && t.memory_budget_bytes() == 0) {
    p.push_back(absl::StrCat(at,
                             ".evict_lru: needs memory_budget_bytes > 0 (the "
                             "budget it keeps the table under)"));
  }
  if (t.has_hot_ids() && t.hot_ids() > kMaxTableHotIds) {
    p.push_back(absl::StrFormat("%s.hot_ids: must be at most %d, got %d", at,
                                kMaxTableHotIds, t.hot_ids()));
  }
  CheckRowCache(t, at, p);
}

// The CTR model names a table of its embedding dimension.
void CheckCtrTable(const JobSpec& spec, std::vector<std::string>& p) {
  if (!spec.model().has_ctr() || spec.model().ctr().table().empty()) return;
  const CtrModel& m = spec.model().ctr();
  for (const TableSpec& t : spec.tables()) {
    if (t.name() != m.table()) continue;
    if (m.embedding_dim() != 0 && t.dim() != m.embedding_dim()) {
      p.push_back(absl::StrFormat(
          "model.ctr.embedding_dim: %d does not match table \"%s\" (dim %d)",
          m.embedding_dim(), absl::CHexEscape(t.name()), t.dim()));
    }
    return;
  }
  p.push_back(absl::StrFormat("model.ctr.table: \"%s\" is not in tables",
                              absl::CHexEscape(m.table())));
}

}  // namespace

std::vector<std::string> TableProblems(const JobSpec& spec) {
  std::vector<std::string> p;
  if (spec.tables_size() > static_cast<int>(kMaxTables)) {
    p.push_back(absl::StrFormat("tables: at most %d, got %d", kMaxTables,
                                spec.tables_size()));
  }
  absl::flat_hash_set<std::string> names;
  for (int i = 0; i < spec.tables_size(); ++i) {
    const std::string at = absl::StrCat("tables[", i, "]");
    const TableSpec& t = spec.tables(i);
    CheckTable(t, at, p);
    if (!names.insert(t.name()).second) {
      p.push_back(absl::StrFormat("%s.name: \"%s\" is used by another table",
                                  at, absl::CHexEscape(t.name())));
    }
  }
  CheckCtrTable(spec, p);
  if (spec.checkpoint().tables_full_every() > kMaxTablesFullEvery) {
    p.push_back(absl::StrFormat(
        "checkpoint.tables_full_every: must be at most %d (0 or 1: every "
        "checkpoint full), got %d",
        kMaxTablesFullEvery, spec.checkpoint().tables_full_every()));
  }
  return p;
}

uint32_t TablesFullEvery(const CheckpointSpec& spec) {
  if (!spec.has_tables_full_every()) return kDefaultTablesFullEvery;
  return std::max<uint32_t>(spec.tables_full_every(), 1);
}

void ApplyTableDefaults(TableSpec* t) {
  if (t->admit_after() == 0) t->set_admit_after(kDefaultTableAdmitAfter);
  if (!t->has_hot_ids()) t->set_hot_ids(kDefaultTableHotIds);
  if (t->max_row_staleness() > 0 && t->row_cache_bytes() == 0) {
    t->set_row_cache_bytes(kDefaultRowCacheBytes);
  }
  if (t->init().kind() == INIT_UNSPECIFIED) {
    t->mutable_init()->set_kind(NORMAL);
    t->mutable_init()->set_scale(kDefaultTableInitScale);
  }
  ApplyOptimizerDefaults(t->mutable_optimizer());
}

}  // namespace ps
