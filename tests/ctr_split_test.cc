// A CTR job whose sparse steps do not fit one message (workerd at
// max_message_bytes 65536, the smallest it takes) on real daemons (2 psd,
// 2 workerd, BSP): every worker sends its steps' rows for a shard in parts
// (SparseExchangeRequest.part/parts), the shards apply each step once, and
// the job SUCCEEDS with bitwise the result of the same job with the default
// 4 MiB messages, where nothing is split.
#include <cstdint>
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/text_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/checksum.h"
#include "tests/job_parameters.h"
#include "tests/local_cluster.h"
#include "tests/testing/ctr_job.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// 40 steps of 2 x 256 examples, dim 16: about 1,300 unique rows per worker,
// shard and step each way (~95 KB of pushed rows and ids, ~95 KB of pulled
// rows), so at 64 KiB every step's call to each shard splits.
// Dense requests stay under the limit: 32 KiB partitions, and the workers'
// max_request_bytes below.
std::string Job() {
  CtrJob job;
  job.name = "ctr-split";
  job.dim = 16;
  job.synthetic_train = 20480;
  job.synthetic_test = 8192;
  job.partition_bytes = 32768;
  return CtrJobSpec(job);
}

struct Result {
  double auc = 0, logloss = 0;
  uint64_t checksum = 0;
  std::string worker_log;
};

void TrainOnce(const std::string& dir, bool small_messages, Result* out) {
  LocalClusterOptions options;
  if (small_messages) {
    // The workers split at 64 KiB; the shards take 128 KiB, so that the
    // test's own parameter read (one 64 KiB chunk and its header per
    // reply) fits too.
    options.psd_extra = "max_message_bytes: 131072\n";
    options.workerd_extra =
        "max_message_bytes: 65536\nmax_request_bytes: 32768\n";
  } else {
    options.workerd_extra = "max_request_bytes: 32768\n";
  }
  LocalCluster cluster(dir, options);
  ASSERT_TRUE(cluster.Start().ok());
  const std::string spec = dir + "/ctr.pbtxt";
  ASSERT_TRUE(WriteFileAtomically(spec, Job()).ok());
  absl::StatusOr<CommandResult> run = cluster.Psctl(
      {"submit", spec, "--wait", "--timeout=240"}, absl::Seconds(270));
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->exit_code, 0)
      << run->out << run->err << cluster.Log("worker0") << cluster.Log("psd0");
  EXPECT_EQ(SummaryField(run->out, "state"), "SUCCEEDED") << run->out;
  ASSERT_TRUE(absl::SimpleAtod(SummaryField(run->out, "test_auc"), &out->auc))
      << run->out;
  ASSERT_TRUE(
      absl::SimpleAtod(SummaryField(run->out, "test_logloss"), &out->logloss));
  const std::string job = SummaryField(run->out, "job");
  absl::StatusOr<JobParameters> params = ReadJobParameters(cluster, job, 2);
  ASSERT_TRUE(params.ok()) << params.status();
  out->checksum = ParamChecksum(params->values);
  EXPECT_TRUE(cluster.Stop().ok());
  out->worker_log = cluster.Log("worker0");
}

// The worker's last "sparse job=" line.
std::string SparseLine(const std::string& log) {
  const size_t at = log.rfind("sparse job=");
  if (at == std::string::npos) return "";
  return log.substr(at, log.find('\n', at) - at);
}

// The worker's count of split calls, from its last "sparse job=" line.
int64_t SplitCalls(const std::string& log) {
  const size_t at = log.rfind("split_calls=");
  int64_t n = -1;
  if (at == std::string::npos) return n;
  const size_t end = log.find(' ', at);
  const std::string value =
      log.substr(at + 12, end == std::string::npos ? end : end - at - 12);
  return absl::SimpleAtoi(value, &n) ? n : -1;
}

TEST(CtrSplitTest, StepsSentInPartsTrainBitwiseLikeWholeOnes) {
  Result whole, split;
  TrainOnce(TestDir("ctr_whole"), false, &whole);
  if (HasFatalFailure()) return;
  TrainOnce(TestDir("ctr_split"), true, &split);
  if (HasFatalFailure()) return;
  std::cout << "whole: " << SparseLine(whole.worker_log)
            << "\nsplit: " << SparseLine(split.worker_log) << "\n";
  EXPECT_EQ(SplitCalls(whole.worker_log), 0) << whole.worker_log;
  // Every step's call to each of the 2 shards, and the evaluation pulls.
  EXPECT_GE(SplitCalls(split.worker_log), 40 * 2) << split.worker_log;
  EXPECT_GT(whole.auc, 0.6);
  EXPECT_EQ(whole.checksum, split.checksum) << "dense parameters differ";
  EXPECT_EQ(whole.auc, split.auc) << "the AUC reads every table row";
  EXPECT_EQ(whole.logloss, split.logloss);
}

}  // namespace
}  // namespace ps
