// The lab workload (ModelSpec.lab) end to end: 2 psd + 2 workerd processes
// on loopback run a 1M-parameter lab job through the real worker, client,
// transport and server paths; the job succeeds with progress and samples/s,
// no worker reads any data, and the parameters read back from the shards are
// exactly what the constant gradients predict (worker/trainer/lab_workload.h).
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/text_proto.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "tests/job_parameters.h"
#include "tests/local_cluster.h"

namespace ps {
namespace {

// 4 layers of 250000 floats (248976 + 1024), 3 steps of 1 ms "compute".
// The workers' data_dir does not exist: a lab job must not look at it.
constexpr char kJob[] = R"pb(
  name: "lab-1m"
  model {
    lab { parameters: 1000000 layers: 4 compute_ms: 1 steps_per_epoch: 3 }
  }
  data { batch_size: 32 epochs: 1 }
  optimizer { kind: SGD learning_rate: 0.5 }
  consistency { mode: BSP step_deadline_ms: 60000 }
  num_workers: 2
  seed: 7
)pb";
constexpr uint64_t kSteps = 3;

TEST(LabJobTest, RunsToTheExactlyPredictedParameters) {
  const std::string dir = TestDir("lab");
  LocalClusterOptions options;
  options.workerd_extra = "data_dir: \"/nonexistent/lab-reads-no-data\"";
  LocalCluster cluster(dir, options);
  ASSERT_TRUE(cluster.Start().ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/job.pbtxt", kJob).ok());
  absl::StatusOr<CommandResult> run =
      cluster.Psctl({"submit", dir + "/job.pbtxt", "--wait", "--timeout=120"},
                    absl::Seconds(150));
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->exit_code, 0)
      << run->out << run->err << cluster.Log("worker0");
  EXPECT_EQ(SummaryField(run->out, "state"), "SUCCEEDED") << run->out;
  EXPECT_EQ(SummaryField(run->out, "steps"), absl::StrCat(kSteps));
  double samples_per_s = 0;
  ASSERT_TRUE(
      absl::SimpleAtod(SummaryField(run->out, "samples_per_s"), &samples_per_s))
      << run->out;
  EXPECT_GT(samples_per_s, 0);
  const std::string job = SummaryField(run->out, "job");
  ASSERT_FALSE(job.empty());

  // Read every parameter back with the placement the coordinator reports.
  absl::StatusOr<JobParameters> read = ReadJobParameters(cluster, job, 2);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->status.progress().step(), kSteps);
  EXPECT_EQ(read->status.spec().tensors_size(), 8);
  const std::vector<float>& params = read->values;
  ASSERT_EQ(params.size(), 1000000u);

  // From zero, each step subtracts lr * mean gradient = 0.5 * (1 + 2) / 2048.
  const float want = -static_cast<float>(kSteps) * 0.5f * (1.5f / 1024);
  size_t wrong = 0;
  for (float p : params) wrong += p != want;
  EXPECT_EQ(wrong, 0u) << "first: " << params[0] << ", want " << want;

  for (int w = 0; w < 2; ++w) {
    const std::string log = cluster.Log(absl::StrCat("worker", w));
    EXPECT_EQ(log.find("lab-reads-no-data"), std::string::npos) << log;
  }
  absl::Status stopped = cluster.Stop();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

}  // namespace
}  // namespace ps
