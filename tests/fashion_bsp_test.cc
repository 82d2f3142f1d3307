// 2 psd + 2 workerd processes train the MLP 784-256-128-10 on Fashion-MNIST
// for one epoch in BSP: test accuracy >= 0.80, and a second run with the same
// seed on a fresh cluster ends with bitwise-identical parameters. The first
// run overlaps communication with compute (the default: per-layer exchanges
// while backward runs), the second does not (workerd disable_overlap): the
// shards sum every chunk in rank order whatever the arrival order, so the
// two agree bit for bit. The same holds on a compressed wire (BF16 values,
// top-k 1% with error feedback: per-chunk residuals), and, with plain SGD
// (a step changes only the entries some worker pushed), whether the workers
// pull deltas (only the entries changed since the version they hold) or
// every chunk in full (workerd disable_delta_pulls).
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
  uint64_t delta_pulls = 0;  // chunk reads answered as deltas, all shards
};

// The sum of every `"field": "N"` in psctl's JSON (uint64 fields print as
// strings).
uint64_t SumJsonField(const std::string& json, const std::string& field) {
  uint64_t sum = 0;
  const std::string key = absl::StrCat("\"", field, "\": \"");
  for (size_t at = json.find(key); at != std::string::npos;
       at = json.find(key, at + 1)) {
    uint64_t v = 0;
    const size_t start = at + key.size();
    if (absl::SimpleAtoi(json.substr(start, json.find('"', start) - start),
                         &v)) {
      sum += v;
    }
  }
  return sum;
}

// The job above on a compressed wire.
constexpr char kCompressedWire[] =
    "wire { format: BF16 topk_fraction: 0.01 }\n";

// The job above with plain SGD (no momentum).
std::string PlainSgdJob() {
  std::string job = kJob;
  const std::string momentum = " momentum: 0.9";
  job.erase(job.find(momentum), momentum.size());
  return job;
}

void TrainOnce(const std::string& name, bool overlap, RunResult* result,
               const std::string& extra_fields = "",
               const std::string& job_text = kJob,
               const std::string& workerd_extra = "") {
  std::string dir = TestDir(name);
  LocalClusterOptions options;
  options.workerd_extra = workerd_extra;
  if (!overlap) options.workerd_extra += "\ndisable_overlap: true";
  LocalCluster cluster(dir, options);
  ASSERT_TRUE(cluster.Start().ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/job.pbtxt",
                                  absl::StrCat(job_text, extra_fields))
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
  absl::StatusOr<CommandResult> stats =
      cluster.Psctl({"stats", "--job=" + job, "--json"}, absl::Seconds(30));
  ASSERT_TRUE(stats.ok()) << stats.status();
  result->delta_pulls = SumJsonField(stats->out, "delta_pulls");
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

TEST(FashionBspTest, DeltaPullsGiveBitwiseTheParametersOfFullPulls) {
  if (!std::filesystem::exists(std::string(kDataDir) +
                               "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed at " << kDataDir;
  }
  RunResult delta, full;
  ASSERT_NO_FATAL_FAILURE(TrainOnce("delta1", /*overlap=*/true, &delta,
                                    kCompressedWire, PlainSgdJob()));
  std::cout << "bf16 top-k 1%, plain SGD, delta pulls: test accuracy "
            << delta.test_accuracy << ", checksum " << delta.checksum
            << ", delta pulls " << delta.delta_pulls << std::endl;
  EXPECT_GE(delta.test_accuracy, 0.70);
  EXPECT_GT(delta.delta_pulls, 0u);
  ASSERT_NO_FATAL_FAILURE(TrainOnce("delta2", /*overlap=*/true, &full,
                                    kCompressedWire, PlainSgdJob(),
                                    "disable_delta_pulls: true"));
  EXPECT_EQ(full.delta_pulls, 0u);
  EXPECT_EQ(delta.checksum, full.checksum)
      << "same seed and wire, delta pulls on and off, different parameters";
  EXPECT_EQ(delta.test_accuracy, full.test_accuracy);
}

}  // namespace
}  // namespace ps
