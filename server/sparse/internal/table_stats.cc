#include "server/sparse/internal/table_stats.h"

#include <algorithm>

namespace ps {
namespace sparse_internal {

void FillTableStats(const TableSet& tables, absl::Time created, absl::Time now,
                    JobStats* out) {
  const double seconds = std::max(absl::ToDoubleSeconds(now - created), 1e-9);
  for (size_t k = 0; k < tables.size(); ++k) {
    const Table& t = tables.at(k);
    const SparseTable::Stats s = t.rows->GetStats();
    TableStats* ts = out->add_tables();
    ts->set_name(t.spec.name());
    ts->set_rows(s.rows);
    ts->set_bytes_used(s.bytes_used);
    ts->set_memory_budget_bytes(s.budget_bytes);
    ts->set_admissions(s.admissions);
    ts->set_pending_admission(s.pending_admission);
    ts->set_evicted_ttl(s.ttl_evictions);
    ts->set_evicted_lru(s.lru_evictions);
    ts->set_rows_pulled(s.rows_pulled);
    ts->set_rows_pushed(s.rows_pushed);
    ts->set_rows_pulled_per_s(s.rows_pulled / seconds);
    ts->set_rows_pushed_per_s(s.rows_pushed / seconds);
    for (const HotId& h : s.hottest) {
      TableHotId* out_h = ts->add_hottest();
      out_h->set_id(h.id);
      out_h->set_pushes(h.pushes);
    }
  }
}

}  // namespace sparse_internal
}  // namespace ps
