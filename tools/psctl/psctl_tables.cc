#include "tools/psctl/psctl_tables.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/table_spec.h"

namespace ps {
namespace psctl {
namespace {

// One table of one job on one shard, or ("all") summed over shards.
struct TableLine {
  std::string job_id;
  std::string shard;  // "0", "1", ... or "all"
  TableStats stats;
};

// 1536 -> "1.5KiB"; bytes under 1 KiB print as "512B".
std::string HumanBytes(uint64_t b) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (b < 1024) return absl::StrCat(b, "B");
  double v = static_cast<double>(b);
  int unit = -1;
  while (v >= 1024 && unit + 1 < 4) {
    v /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f%s", v, kUnits[unit]);
}

// The hottest `n` of `hot` by pushes (ties: lower id first), "id:pushes"
// joined by commas; "-" when there are none.
std::string HotColumn(std::vector<TableHotId> hot, uint32_t n) {
  std::sort(hot.begin(), hot.end(),
            [](const TableHotId& a, const TableHotId& b) {
              return a.pushes() != b.pushes() ? a.pushes() > b.pushes()
                                              : a.id() < b.id();
            });
  if (hot.size() > n) hot.resize(n);
  if (hot.empty()) return "-";
  return absl::StrJoin(hot, ",", [](std::string* out, const TableHotId& h) {
    absl::StrAppend(out, h.id(), ":", h.pushes());
  });
}

// Sums `add` into `sum`. Ids belong to exactly one shard
// (core/sparse_ids.h), so the shards' hottest lists are disjoint and merge
// by concatenation. A budget of 0 means none: the sum keeps 0 if any
// shard has none (the table as a whole is then unbounded).
void Accumulate(const TableStats& add, bool first, TableStats* sum) {
  sum->set_rows(sum->rows() + add.rows());
  sum->set_bytes_used(sum->bytes_used() + add.bytes_used());
  const bool unbounded = (!first && sum->memory_budget_bytes() == 0) ||
                         add.memory_budget_bytes() == 0;
  sum->set_memory_budget_bytes(
      unbounded ? 0 : sum->memory_budget_bytes() + add.memory_budget_bytes());
  sum->set_admissions(sum->admissions() + add.admissions());
  sum->set_pending_admission(sum->pending_admission() +
                             add.pending_admission());
  sum->set_evicted_ttl(sum->evicted_ttl() + add.evicted_ttl());
  sum->set_evicted_lru(sum->evicted_lru() + add.evicted_lru());
  sum->set_rows_pulled(sum->rows_pulled() + add.rows_pulled());
  sum->set_rows_pushed(sum->rows_pushed() + add.rows_pushed());
  sum->set_rows_pulled_per_s(sum->rows_pulled_per_s() +
                             add.rows_pulled_per_s());
  sum->set_rows_pushed_per_s(sum->rows_pushed_per_s() +
                             add.rows_pushed_per_s());
  for (const TableHotId& h : add.hottest()) *sum->add_hottest() = h;
}

// Every (job, table) line in print order, each table's shards followed by
// their sum when more than one shard holds it.
std::vector<TableLine> CollectLines(
    const std::vector<const ShardStats*>& shards) {
  // job -> table names in first-seen (spec) order -> lines per shard.
  std::map<std::string, std::vector<std::string>> order;
  std::map<std::pair<std::string, std::string>, std::vector<TableLine>> lines;
  for (const ShardStats* s : shards) {
    for (const JobStats& j : s->job_stats()) {
      for (const TableStats& t : j.tables()) {
        auto& per_shard = lines[{j.job_id(), t.name()}];
        if (per_shard.empty()) order[j.job_id()].push_back(t.name());
        per_shard.push_back({j.job_id(), absl::StrCat(s->shard_id()), t});
      }
    }
  }
  std::vector<TableLine> out;
  for (const auto& [job, names] : order) {
    for (const std::string& name : names) {
      const std::vector<TableLine>& per_shard = lines[{job, name}];
      out.insert(out.end(), per_shard.begin(), per_shard.end());
      if (per_shard.size() < 2) continue;
      TableLine sum{job, "all", TableStats()};
      sum.stats.set_name(name);
      for (size_t i = 0; i < per_shard.size(); ++i) {
        Accumulate(per_shard[i].stats, i == 0, &sum.stats);
      }
      out.push_back(std::move(sum));
    }
  }
  return out;
}

std::string FormatLine(const TableLine& l, const TableViewOptions& o) {
  const TableStats& t = l.stats;
  const uint64_t budget = t.memory_budget_bytes();
  const std::string used =
      budget == 0 ? "-"
                  : absl::StrFormat("%.0f%%", 100.0 * t.bytes_used() / budget);
  const std::string per_row =
      t.rows() == 0
          ? "-"
          : absl::StrFormat("%.1f", static_cast<double>(t.bytes_used()) /
                                        static_cast<double>(t.rows()));
  std::string line = absl::StrFormat(
      "%-14s %-12s %-5s %11d %10s %10s %5s %8s %11d %10d %9d %9d %12.0f "
      "%12.0f",
      l.job_id, t.name(), l.shard, t.rows(), HumanBytes(t.bytes_used()),
      budget == 0 ? "-" : HumanBytes(budget), used, per_row, t.admissions(),
      t.pending_admission(), t.evicted_ttl(), t.evicted_lru(),
      t.rows_pulled_per_s(), t.rows_pushed_per_s());
  if (o.hot_ids > 0) {
    std::vector<TableHotId> hot(t.hottest().begin(), t.hottest().end());
    absl::StrAppend(&line, " ", HotColumn(std::move(hot), o.hot_ids));
  }
  return absl::StrCat(line, "\n");
}

}  // namespace

absl::StatusOr<uint32_t> ParseHotIds(const std::string& value, uint32_t def) {
  if (value.empty()) return def;
  uint32_t n = 0;
  if (!absl::SimpleAtoi(value, &n) || n > kMaxTableHotIds) {
    return absl::InvalidArgumentError(
        absl::StrCat("--hot: want a whole number in [0, ", kMaxTableHotIds,
                     "], got \"", value, "\""));
  }
  return n;
}

std::string FormatTableStats(const std::vector<const ShardStats*>& shards,
                             const TableViewOptions& options) {
  const std::vector<TableLine> lines = CollectLines(shards);
  if (lines.empty()) return "";
  std::string out =
      "\nSPARSE TABLES (SHARD all: summed over the shards that answered; "
      "rates since registration)\n";
  absl::StrAppend(
      &out,
      absl::StrFormat("%-14s %-12s %-5s %11s %10s %10s %5s %8s %11s %10s %9s "
                      "%9s %12s %12s",
                      "JOB", "TABLE", "SHARD", "ROWS", "BYTES", "BUDGET",
                      "USED", "B/ROW", "ADMISSIONS", "PENDING", "EVICT_TTL",
                      "EVICT_LRU", "PULL_ROWS/S", "PUSH_ROWS/S"));
  if (options.hot_ids > 0) absl::StrAppend(&out, " HOTTEST(id:pushes)");
  absl::StrAppend(&out, "\n");
  for (const TableLine& l : lines)
    absl::StrAppend(&out, FormatLine(l, options));
  return out;
}

}  // namespace psctl
}  // namespace ps
