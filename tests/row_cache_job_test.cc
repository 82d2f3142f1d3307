// The worker-side hot-row cache end to end (TableSpec.max_row_staleness,
// docs/SPARSE.md "Hot-row cache"): the CTR job on real daemons (2 psd, 2
// workerd, BSP) trained with max_row_staleness 0 and 4. With 4 the workers
// pull far fewer rows (rank 0's count in the submit summary, and the
// shards' own count of rows served), push the same rows, and reach the same
// AUC within a small tolerance.
#include <cstdint>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/text_proto.h"
#include "gtest/gtest.h"
#include "proto/ps.pb.h"
#include "tests/job_parameters.h"
#include "tests/local_cluster.h"
#include "tests/testing/cluster_fixture.h"

namespace ps {
namespace {

// ctr_job_test's CI-sized job: 160 steps of 2 x 256 examples.
constexpr char kCtrJob[] = R"pb(
  name: "ctr-cache"
  model { ctr { table: "emb" embedding_dim: 8 hidden: 64 hidden: 32 } }
  tables {
    name: "emb"
    dim: 8
    init { kind: NORMAL scale: 0.01 }
    optimizer { kind: ADAGRAD learning_rate: 0.05 }
    max_row_staleness: STALENESS
  }
  data {
    dataset: "ctr-synthetic"
    batch_size: 256
    epochs: 1
    synthetic_train: 81920
    synthetic_test: 16384
  }
  optimizer { kind: ADAGRAD learning_rate: 0.01 }
  consistency { mode: BSP step_deadline_ms: 30000 }
  num_workers: 2
  partition_bytes: 65536
  seed: 11
)pb";

struct CacheRun {
  double auc = 0;
  uint64_t pushed = 0, pulled = 0, hits = 0;  // rank 0's, training
  uint64_t shard_pulled = 0;                  // both shards, evaluation too
};

uint64_t Field(const std::string& summary, const std::string& key) {
  uint64_t v = 0;
  EXPECT_TRUE(absl::SimpleAtoi(SummaryField(summary, key), &v))
      << key << " in " << summary;
  return v;
}

void TrainOnce(const std::string& dir, int staleness, CacheRun* out) {
  LocalCluster cluster(dir, LocalClusterOptions{});
  ASSERT_TRUE(cluster.Start().ok());
  const std::string spec = dir + "/ctr.pbtxt";
  ASSERT_TRUE(WriteFileAtomically(
                  spec, absl::StrReplaceAll(kCtrJob, {{"STALENESS",
                                                       absl::StrCat(staleness)}}))
                  .ok());
  absl::StatusOr<CommandResult> run = cluster.Psctl(
      {"submit", spec, "--wait", "--timeout=240"}, absl::Seconds(270));
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->exit_code, 0)
      << run->out << run->err << cluster.Log("worker0") << cluster.Log("psd0");
  EXPECT_EQ(SummaryField(run->out, "state"), "SUCCEEDED") << run->out;
  ASSERT_TRUE(absl::SimpleAtod(SummaryField(run->out, "test_auc"), &out->auc))
      << run->out;
  out->pushed = Field(run->out, "table_rows_pushed");
  out->pulled = Field(run->out, "table_rows_pulled");
  out->hits = Field(run->out, "row_cache_hits");
  const std::string job = SummaryField(run->out, "job");
  absl::StatusOr<std::vector<std::string>> addresses =
      ShardAddresses(cluster, 2);
  ASSERT_TRUE(addresses.ok()) << addresses.status();
  for (const std::string& address : *addresses) {
    absl::StatusOr<JobStats> stats = ReadShardJobStats(address, job);
    ASSERT_TRUE(stats.ok()) << stats.status();
    ASSERT_EQ(stats->tables_size(), 1);
    out->shard_pulled += stats->tables(0).rows_pulled();
  }
  EXPECT_TRUE(cluster.Stop().ok());
}

TEST(RowCacheJobTest, StalenessFourPullsFewerRowsAtTheSameAuc) {
  CacheRun fresh, cached;
  TrainOnce(TestDir("cache_0"), 0, &fresh);
  if (HasFatalFailure()) return;
  TrainOnce(TestDir("cache_4"), 4, &cached);
  if (HasFatalFailure()) return;

  EXPECT_EQ(fresh.hits, 0u);
  EXPECT_EQ(cached.pushed, fresh.pushed) << "every gradient is still pushed";
  EXPECT_EQ(cached.hits + cached.pulled, fresh.pulled);
  // docs/SPARSE.md: 61% fewer rows pulled on this job.
  EXPECT_LT(cached.pulled, fresh.pulled / 2)
      << cached.pulled << " vs " << fresh.pulled;
  // The shards served fewer rows by at least rank 0's saving (both workers
  // save; evaluation pulls the same rows in both runs).
  EXPECT_LE(cached.shard_pulled + cached.hits, fresh.shard_pulled);
  // The small run's AUC moves a little with staleness (docs/SPARSE.md has
  // the full-size figures).
  EXPECT_NEAR(cached.auc, fresh.auc, 0.005);
  EXPECT_GT(cached.auc, 0.74);
}

}  // namespace
}  // namespace ps
