// 2 psd + 2 workerd processes train the MLP 784-256-128-10 on Fashion-MNIST
// for one epoch in BSP: test accuracy >= 0.80, and a second run with the same
// seed on a fresh cluster ends with bitwise-identical parameters. The first
// run overlaps communication with compute (the default: per-layer exchanges
// while backward runs), the second does not (workerd disable_overlap): the
// shards sum every chunk in rank order whatever the arrival order, so the
// two agree bit for bit. The same holds on a compressed wire (BF16 values,
// top-k 1% with error feedback: per-chunk residuals).
#include <filesystem>
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/text_proto.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "tests/checksum.h"
#include "tests/job_parameters.h"
#include "tests/local_cluster.h"

namespace ps {
namespace {

constexpr char kDataDir[] = "/usr/share/datasets/fashion-mnist";

constexpr char kJob[] = R"pb(
  name: "fashion-mlp-1-epoch"
  model { mlp { input_dim: 784 hidden: 256 hidden: 128 num_classes: 10 } }
  data { dataset: "fashion-mnist" batch_size: 64 epochs: 1 }
  optimizer { kind: SGD learning_rate: 0.05 momentum: 0.9 }
  consistency { mode: BSP step_deadline_ms: 60000 }
  num_workers: 2
  partition_bytes: 262144
  seed: 42
)pb";

struct RunResult {
  double test_accuracy = 0;
  uint64_t checksum = 0;
};

// The job above on a compressed wire.
constexpr char kCompressedWire[] =
    "wire { format: BF16 topk_fraction: 0.01 }\n";

void TrainOnce(const std::string& name, bool overlap, RunResult* result,
               const std::string& extra_fields = "") {
  std::string dir = TestDir(name);
  LocalClusterOptions options;
  if (!overlap) options.workerd_extra = "disable_overlap: true";
  LocalCluster cluster(dir, options);
  ASSERT_TRUE(cluster.Start().ok());
  ASSERT_TRUE(
      WriteFileAtomically(dir + "/job.pbtxt", absl::StrCat(kJob, extra_fields))
          .ok());
  absl::StatusOr<CommandResult> run =
      cluster.Psctl({"submit", dir + "/job.pbtxt", "--wait", "--timeout=400"},
                    absl::Seconds(420));
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->exit_code, 0)
      << run->out << run->err << cluster.Log("worker0");
  ASSERT_TRUE(absl::SimpleAtod(SummaryField(run->out, "test_accuracy"),
                               &result->test_accuracy));
  std::string job = SummaryField(run->out, "job");
  EXPECT_EQ(SummaryField(run->out, "overlap"), overlap ? "1" : "0") << run->out;

  // The parameters stay on the shards after success: read them all back
  // with the placement the coordinator reports.
  absl::StatusOr<JobParameters> read = ReadJobParameters(cluster, job, 2);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_GT(read->status.progress().step(), 0u);
  const std::vector<float>& params = read->values;
  result->checksum = ParamChecksum(params);
  absl::Status stopped = cluster.Stop();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

TEST(FashionBspTest, OneEpochReachesEightyPercentAndIsBitwiseReproducible) {
  if (!std::filesystem::exists(std::string(kDataDir) +
                               "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed at " << kDataDir
                 << " (tools/setup.sh installs dataset-fashion-mnist)";
  }
  RunResult first, second;
  ASSERT_NO_FATAL_FAILURE(TrainOnce("run1", /*overlap=*/true, &first));
  std::cout << "run 1: test accuracy " << first.test_accuracy << ", checksum "
            << first.checksum << std::endl;
  EXPECT_GE(first.test_accuracy, 0.80);
  ASSERT_NO_FATAL_FAILURE(TrainOnce("run2", /*overlap=*/false, &second));
  EXPECT_EQ(first.checksum, second.checksum)
      << "same seed, overlap on and off, different parameters";
  EXPECT_EQ(first.test_accuracy, second.test_accuracy);
}

TEST(FashionBspTest, CompressedWireTrainsAndIsBitwiseReproducible) {
  if (!std::filesystem::exists(std::string(kDataDir) +
                               "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed at " << kDataDir;
  }
  RunResult first, second;
  ASSERT_NO_FATAL_FAILURE(
      TrainOnce("wire1", /*overlap=*/true, &first, kCompressedWire));
  std::cout << "bf16 top-k 1%: test accuracy " << first.test_accuracy
            << ", checksum " << first.checksum << std::endl;
  EXPECT_GE(first.test_accuracy, 0.75);
  ASSERT_NO_FATAL_FAILURE(
      TrainOnce("wire2", /*overlap=*/false, &second, kCompressedWire));
  EXPECT_EQ(first.checksum, second.checksum)
      << "same seed and wire, overlap on and off, different parameters";
}

}  // namespace
}  // namespace ps
