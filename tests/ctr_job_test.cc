// The CTR workload end to end on real daemons (2 psd, 2 workerd): a ctr
// model whose embedding rows live in a sparse table spread over both shards
// trains on the synthetic Criteo-like set, reaches an AUC near the planted
// teacher's, reports its table in psctl stats, and under BSP ends bitwise
// the same when run twice.
#include "tests/testing/ctr_job.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/text_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/checksum.h"
#include "tests/job_parameters.h"
#include "tests/local_cluster.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// CI-sized: 160 steps of 2 x 256 examples, a 16k-example test set.
std::string CtrSmallJob() {
  CtrJob job;
  job.name = "ctr-small";
  return CtrJobSpec(job);
}

struct CtrRun {
  double auc = 0, teacher_auc = 0, logloss = 0;
  uint64_t checksum = 0;
  std::string stats;
};

void TrainOnce(const std::string& dir, CtrRun* out) {
  LocalCluster cluster(dir, LocalClusterOptions{});
  ASSERT_TRUE(cluster.Start().ok());
  const std::string spec = dir + "/ctr.pbtxt";
  ASSERT_TRUE(WriteFileAtomically(spec, CtrSmallJob()).ok());
  absl::StatusOr<CommandResult> run = cluster.Psctl(
      {"submit", spec, "--wait", "--timeout=240"}, absl::Seconds(270));
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->exit_code, 0)
      << run->out << run->err << cluster.Log("worker0") << cluster.Log("psd0");
  EXPECT_EQ(SummaryField(run->out, "state"), "SUCCEEDED") << run->out;
  ASSERT_TRUE(absl::SimpleAtod(SummaryField(run->out, "test_auc"), &out->auc))
      << run->out;
  ASSERT_TRUE(absl::SimpleAtod(SummaryField(run->out, "teacher_auc"),
                               &out->teacher_auc));
  ASSERT_TRUE(
      absl::SimpleAtod(SummaryField(run->out, "test_logloss"), &out->logloss));
  const std::string job = SummaryField(run->out, "job");
  absl::StatusOr<JobParameters> params = ReadJobParameters(cluster, job, 2);
  ASSERT_TRUE(params.ok()) << params.status();
  out->checksum = ParamChecksum(params->values);
  absl::StatusOr<CommandResult> stats = cluster.Psctl({"stats", job});
  ASSERT_TRUE(stats.ok());
  out->stats = stats->out;
  EXPECT_TRUE(cluster.Stop().ok());
}

TEST(CtrJobTest, TrainsNearTheTeacherAndBspIsReproducible) {
  CtrRun a, b;
  TrainOnce(TestDir("ctr_a"), &a);
  if (HasFatalFailure()) return;
  // The teacher's AUC is the best reachable; this small run sees each id
  // only a few times (0.756 vs 0.812 measured), so it stays a few points
  // below; docs/SPARSE.md has the full-size run.
  EXPECT_GT(a.teacher_auc, 0.75);
  EXPECT_GT(a.auc, 0.74) << "teacher " << a.teacher_auc;
  EXPECT_LT(a.teacher_auc - a.auc, 0.07) << a.auc << " vs " << a.teacher_auc;
  EXPECT_GT(a.logloss, 0);
  EXPECT_LT(a.logloss, 0.6);
  EXPECT_THAT(a.stats, HasSubstr("emb")) << a.stats;

  TrainOnce(TestDir("ctr_b"), &b);
  if (HasFatalFailure()) return;
  EXPECT_EQ(a.checksum, b.checksum) << "BSP must be bitwise reproducible";
  EXPECT_EQ(a.auc, b.auc);
  EXPECT_EQ(a.logloss, b.logloss);
}

}  // namespace
}  // namespace ps
