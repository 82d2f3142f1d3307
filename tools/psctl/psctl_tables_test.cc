#include "tools/psctl/psctl_tables.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace psctl {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TableStats Table(const std::string& name, uint64_t rows, uint64_t bytes,
                 uint64_t budget) {
  TableStats t;
  t.set_name(name);
  t.set_rows(rows);
  t.set_bytes_used(bytes);
  t.set_memory_budget_bytes(budget);
  return t;
}

void AddHot(TableStats* t, uint64_t id, uint64_t pushes) {
  TableHotId* h = t->add_hottest();
  h->set_id(id);
  h->set_pushes(pushes);
}

ShardStats Shard(uint32_t id, std::vector<JobStats> jobs) {
  ShardStats s;
  s.set_shard_id(id);
  for (JobStats& j : jobs) *s.add_job_stats() = std::move(j);
  return s;
}

JobStats Job(const std::string& id, std::vector<TableStats> tables) {
  JobStats j;
  j.set_job_id(id);
  for (TableStats& t : tables) *j.add_tables() = std::move(t);
  return j;
}

// The line of `out` whose first three columns are job, table and shard.
std::string LineOf(const std::string& out, const std::string& job,
                   const std::string& table, const std::string& shard) {
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    std::vector<absl::string_view> cols =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (cols.size() >= 3 && cols[0] == job && cols[1] == table &&
        cols[2] == shard) {
      return std::string(line);
    }
  }
  return "";
}

// The whitespace-separated column `i` of `line` ("" if it has fewer).
std::string Col(const std::string& line, size_t i) {
  std::vector<std::string> cols = absl::StrSplit(line, ' ', absl::SkipEmpty());
  return i < cols.size() ? cols[i] : "";
}

TEST(FormatTableStatsTest, JobsWithoutTablesPrintNothing) {
  ShardStats s0 = Shard(0, {Job("dense", {})});
  ShardStats s1 = Shard(1, {Job("dense", {})});
  EXPECT_EQ(FormatTableStats({&s0, &s1}, TableViewOptions()), "");
  EXPECT_EQ(FormatTableStats({}, TableViewOptions()), "");
}

TEST(FormatTableStatsTest, OneLinePerShardAndTheirSum) {
  TableStats a0 = Table("emb", 1000, 96000, 1 << 20);
  a0.set_admissions(1200);
  a0.set_pending_admission(30);
  a0.set_evicted_ttl(150);
  a0.set_evicted_lru(50);
  a0.set_rows_pulled_per_s(2000.4);
  a0.set_rows_pushed_per_s(500);
  AddHot(&a0, 7, 90);
  AddHot(&a0, 3, 40);
  TableStats a1 = Table("emb", 3000, 288000, 1 << 20);
  a1.set_admissions(3000);
  a1.set_rows_pulled_per_s(1000);
  a1.set_rows_pushed_per_s(250);
  AddHot(&a1, 8, 95);
  AddHot(&a1, 2, 40);
  ShardStats s0 = Shard(0, {Job("job-1", {a0})});
  ShardStats s1 = Shard(1, {Job("job-1", {a1})});
  const std::string out = FormatTableStats({&s0, &s1}, TableViewOptions());

  EXPECT_THAT(out, HasSubstr("SPARSE TABLES"));
  const std::string l0 = LineOf(out, "job-1", "emb", "0");
  ASSERT_FALSE(l0.empty()) << out;
  // ROWS BYTES BUDGET USED B/ROW ADMISSIONS PENDING EVICT_TTL EVICT_LRU
  // PULL_ROWS/S PUSH_ROWS/S HOTTEST
  EXPECT_EQ(Col(l0, 3), "1000");
  EXPECT_EQ(Col(l0, 4), "93.8KiB");
  EXPECT_EQ(Col(l0, 5), "1.0MiB");
  EXPECT_EQ(Col(l0, 6), "9%");
  EXPECT_EQ(Col(l0, 7), "96.0");
  EXPECT_EQ(Col(l0, 8), "1200");
  EXPECT_EQ(Col(l0, 9), "30");
  EXPECT_EQ(Col(l0, 10), "150");
  EXPECT_EQ(Col(l0, 11), "50");
  EXPECT_EQ(Col(l0, 12), "2000");
  EXPECT_EQ(Col(l0, 13), "500");
  EXPECT_EQ(Col(l0, 14), "7:90,3:40");

  const std::string all = LineOf(out, "job-1", "emb", "all");
  ASSERT_FALSE(all.empty()) << out;
  EXPECT_EQ(Col(all, 3), "4000");
  EXPECT_EQ(Col(all, 5), "2.0MiB");  // the shards' budgets add up
  EXPECT_EQ(Col(all, 7), "96.0");
  EXPECT_EQ(Col(all, 8), "4200");
  EXPECT_EQ(Col(all, 12), "3000");
  EXPECT_EQ(Col(all, 13), "750");
  // Merged over shards, by pushes, ties to the lower id.
  EXPECT_EQ(Col(all, 14), "8:95,7:90,2:40");
  // The sum comes after the shards it sums.
  EXPECT_LT(out.find(l0), out.find(all));
}

TEST(FormatTableStatsTest, HotIdsFlagShowsMoreOrNone) {
  TableStats t = Table("emb", 10, 960, 0);
  for (uint64_t id = 1; id <= 6; ++id) AddHot(&t, id, 100 - id);
  ShardStats s0 = Shard(0, {Job("j", {t})});
  EXPECT_EQ(
      Col(LineOf(FormatTableStats({&s0}, {.hot_ids = 5}), "j", "emb", "0"), 14),
      "1:99,2:98,3:97,4:96,5:95");
  const std::string none = FormatTableStats({&s0}, {.hot_ids = 0});
  EXPECT_THAT(none, Not(HasSubstr("HOTTEST")));
  EXPECT_EQ(Col(LineOf(none, "j", "emb", "0"), 14), "");
  // More than the shard reports: what there is.
  EXPECT_EQ(
      Col(LineOf(FormatTableStats({&s0}, {.hot_ids = 50}), "j", "emb", "0"),
          14),
      "1:99,2:98,3:97,4:96,5:95,6:94");
}

TEST(FormatTableStatsTest, NoBudgetNoRowsNoHotIds) {
  TableStats unbounded = Table("emb", 0, 512, 0);
  TableStats bounded = Table("emb", 0, 1024, 4096);
  ShardStats s0 = Shard(0, {Job("j", {unbounded})});
  ShardStats s1 = Shard(1, {Job("j", {bounded})});
  const std::string out = FormatTableStats({&s0, &s1}, TableViewOptions());
  const std::string l0 = LineOf(out, "j", "emb", "0");
  EXPECT_EQ(Col(l0, 4), "512B");
  EXPECT_EQ(Col(l0, 5), "-");   // no budget
  EXPECT_EQ(Col(l0, 6), "-");   // so no fraction of it
  EXPECT_EQ(Col(l0, 7), "-");   // no rows: no bytes per row
  EXPECT_EQ(Col(l0, 14), "-");  // no hot ids yet
  EXPECT_EQ(Col(LineOf(out, "j", "emb", "1"), 6), "25%");
  // One shard without a budget leaves the table as a whole without one.
  EXPECT_EQ(Col(LineOf(out, "j", "emb", "all"), 5), "-");
}

TEST(FormatTableStatsTest, JobsInIdOrderTablesInSpecOrderSingleShardNoSum) {
  ShardStats s0 = Shard(
      0, {Job("b-job", {Table("zeta", 1, 96, 0), Table("alpha", 1, 96, 0)}),
          Job("a-job", {Table("t", 1, 96, 0)})});
  const std::string out = FormatTableStats({&s0}, TableViewOptions());
  const size_t a = out.find(LineOf(out, "a-job", "t", "0"));
  const size_t zeta = out.find(LineOf(out, "b-job", "zeta", "0"));
  const size_t alpha = out.find(LineOf(out, "b-job", "alpha", "0"));
  ASSERT_NE(a, std::string::npos);
  EXPECT_LT(a, zeta);
  EXPECT_LT(zeta, alpha);
  EXPECT_EQ(LineOf(out, "b-job", "zeta", "all"), "") << "one shard: no sum";
}

TEST(ParseHotIdsTest, AcceptsWholeNumbersInRange) {
  EXPECT_EQ(*ParseHotIds("", 3), 3u);
  EXPECT_EQ(*ParseHotIds("0", 3), 0u);
  EXPECT_EQ(*ParseHotIds("1000", 3), 1000u);
  for (const char* bad : {"-1", "x", "1.5", "1001", "99999999999"}) {
    absl::StatusOr<uint32_t> n = ParseHotIds(bad, 3);
    ASSERT_FALSE(n.ok()) << bad;
    EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(n.status().message(), HasSubstr("--hot"));
  }
}

}  // namespace
}  // namespace psctl
}  // namespace ps
