// `psctl stats` against two in-process shards (psbench's BenchCluster: real
// gRPC servers on 127.0.0.1:0): a job with a sparse table gets the table
// section with the rows each shard holds, their sum and the hottest ids; a
// dense-only job's output has none; a bad --hot is a usage error.
#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "core/sparse_ids.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/psbench/psbench_cluster.h"
#include "tools/psctl/psctl.h"

namespace ps {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kShards = 2;
constexpr uint32_t kDim = 4;

class PsctlStatsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<bench::BenchCluster>> c =
        bench::BenchCluster::StartInProcess(kShards);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = *std::move(c);
    cluster_file_ = absl::StrCat(::testing::TempDir(), "/cluster.pbtxt");
    std::ofstream f(cluster_file_);
    for (const std::string& a : cluster_->addresses()) {
      f << "shards { address: \"" << a << "\" }\n";
    }
    f << "coordinator_shard: 0\n";
  }

  // Registers `job_id` (one dense tensor; with `table`, a sparse table
  // "emb" of kDim floats, Adagrad, rows created at the first push).
  void Register(const std::string& job_id, bool table) {
    bench::BenchJob job;
    job.job_id = job_id;
    job.floats = 64;
    if (table) {
      TableSpec t;
      t.set_name("emb");
      t.set_dim(kDim);
      t.mutable_optimizer()->set_kind(ADAGRAD);
      t.mutable_optimizer()->set_learning_rate(0.1f);
      t.set_admit_after(1);
      t.set_hot_ids(64);  // more than the ids pushed: exact counts
      job.tables.push_back(t);
    }
    absl::StatusOr<Assignment> a = cluster_->RegisterJob(job);
    ASSERT_TRUE(a.ok()) << a.status();
  }

  // Worker 0 pushes `ids` (each to the shard that owns it) as ASP step
  // `step`, gradients all 1.
  void Push(const std::string& job_id, uint64_t step,
            const std::vector<uint64_t>& ids) {
    for (uint32_t s = 0; s < kShards; ++s) {
      SparseExchangeRequest req;
      req.set_job_id(job_id);
      req.set_step(step);
      req.set_push(true);
      SparseRows* rows = req.add_gradients();
      rows->set_table("emb");
      std::vector<float> ones;
      for (uint64_t id : ids) {
        if (ShardForId(id, kShards) != s) continue;
        rows->mutable_ids()->append(reinterpret_cast<const char*>(&id),
                                    sizeof(id));
        ones.insert(ones.end(), kDim, 1.0f);
      }
      rows->set_values(reinterpret_cast<const char*>(ones.data()),
                       ones.size() * sizeof(float));
      auto stub = ParameterServer::NewStub(
          cluster_->security().NewChannel(cluster_->addresses()[s]));
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
      SparseExchangeResponse resp;
      grpc::Status st = stub->SparseExchange(&ctx, req, &resp);
      ASSERT_TRUE(st.ok()) << st.error_message();
    }
  }

  // psctl's exit code, with its stdout in `out`.
  int Psctl(std::vector<std::string> args, std::string* out) {
    args.push_back("--cluster=" + cluster_file_);
    std::ostringstream o, e;
    const int rc = RunPsctl(args, o, e, /*interactive=*/false);
    *out = o.str() + e.str();
    return rc;
  }

  std::unique_ptr<bench::BenchCluster> cluster_;
  std::string cluster_file_;
};

// The line of `out` that starts with job, table and shard.
std::string LineOf(const std::string& out, const std::string& prefix_cols) {
  const std::vector<std::string> want =
      absl::StrSplit(prefix_cols, ' ', absl::SkipEmpty());
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    std::vector<std::string> cols =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (cols.size() >= want.size() &&
        std::equal(want.begin(), want.end(), cols.begin())) {
      return std::string(line);
    }
  }
  return "";
}

std::string Col(const std::string& line, size_t i) {
  std::vector<std::string> cols = absl::StrSplit(line, ' ', absl::SkipEmpty());
  return i < cols.size() ? cols[i] : "";
}

TEST_F(PsctlStatsTest, ShowsEachTableByShardAndSummed) {
  Register("job-sparse", /*table=*/true);
  std::vector<uint64_t> ids;
  for (uint64_t id = 1; id <= 40; ++id) ids.push_back(id);
  Push("job-sparse", 1, ids);
  Push("job-sparse", 2, {7, 11});
  Push("job-sparse", 3, {7});
  uint64_t on0 = 0;
  for (uint64_t id : ids) on0 += ShardForId(id, kShards) == 0;
  ASSERT_GT(on0, 0u);
  ASSERT_LT(on0, ids.size()) << "both shards should hold rows";

  std::string out;
  ASSERT_EQ(Psctl({"stats", "--hot=2"}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("SHARD ")) << "the shard table stays";
  EXPECT_THAT(out, HasSubstr("SPARSE TABLES"));
  const std::string l0 = LineOf(out, "job-sparse emb 0");
  const std::string l1 = LineOf(out, "job-sparse emb 1");
  const std::string all = LineOf(out, "job-sparse emb all");
  ASSERT_FALSE(l0.empty() || l1.empty() || all.empty()) << out;
  EXPECT_EQ(Col(l0, 3), absl::StrCat(on0));
  EXPECT_EQ(Col(l1, 3), absl::StrCat(ids.size() - on0));
  EXPECT_EQ(Col(all, 3), absl::StrCat(ids.size()));
  EXPECT_EQ(Col(all, 8), absl::StrCat(ids.size())) << "admissions";
  EXPECT_NE(Col(all, 7), "-") << "bytes per row";
  // Id 7 was pushed 3 times, 11 twice: the hottest two over both shards.
  EXPECT_EQ(Col(all, 14), "7:3,11:2") << out;

  // --job narrows it; --json carries the same fields.
  ASSERT_EQ(Psctl({"stats", "--json", "--job=job-sparse"}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("\"tables\""));
  EXPECT_THAT(out, HasSubstr("\"hottest\""));
}

TEST_F(PsctlStatsTest, DenseJobsPrintNoTableSection) {
  Register("job-dense", /*table=*/false);
  std::string out;
  ASSERT_EQ(Psctl({"stats"}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("SHARD "));
  EXPECT_THAT(out, Not(HasSubstr("SPARSE TABLES")));
  // Two header-plus-shard lines, nothing else.
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1 + kShards) << out;
}

TEST_F(PsctlStatsTest, BadHotIsAUsageError) {
  std::string out;
  EXPECT_EQ(Psctl({"stats", "--hot=many"}, &out), 2);
  EXPECT_THAT(out, HasSubstr("--hot"));
}

}  // namespace
}  // namespace ps
