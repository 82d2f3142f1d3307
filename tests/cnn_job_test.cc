// 2 psd + 2 workerd processes train a small built-in CNN (ModelSpec.cnn:
// conv5x5-8, pool, conv5x5-16, pool, fc 64, fc 10) on 4000 Fashion-MNIST
// training images for 2 epochs in BSP: test accuracy well above chance
// (0.1), and a second run with the same seed on a fresh cluster, without
// overlap, ends with bitwise-identical parameters. Both runs leave the
// kernels to cpu_kernels "auto" with one cpu_kernel_choices_file: the first
// run's workerds time each layer shape and record the choice there, the
// second run's follow it, so the model computes the same bits (the shards
// sum in rank order).
#include <filesystem>
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/text_proto.h"
#include "gtest/gtest.h"
#include "tests/checksum.h"
#include "tests/job_parameters.h"
#include "tests/local_cluster.h"

namespace ps {
namespace {

constexpr char kDataDir[] = "/usr/share/datasets/fashion-mnist";

constexpr char kJob[] = R"pb(
  name: "fashion-cnn-small"
  model {
    cnn {
      height: 28
      width: 28
      channels: 1
      conv { filters: 8 kernel: 5 }
      conv { filters: 16 kernel: 5 }
      hidden: 64
      num_classes: 10
    }
  }
  data {
    dataset: "fashion-mnist"
    batch_size: 32
    epochs: 2
    max_train_examples: 4000
  }
  optimizer { kind: SGD learning_rate: 0.02 momentum: 0.9 }
  consistency { mode: BSP step_deadline_ms: 60000 }
  num_workers: 2
  partition_bytes: 65536
  seed: 7
)pb";

struct RunResult {
  double test_accuracy = 0;
  uint64_t checksum = 0;
};

void TrainOnce(const std::string& name, bool overlap,
               const std::string& kernel_choices, RunResult* result) {
  std::string dir = TestDir(name);
  LocalClusterOptions options;
  options.cpu_kernels = "auto";
  options.workerd_extra =
      absl::StrCat("cpu_kernel_choices_file: \"", kernel_choices, "\"\n",
                   overlap ? "" : "disable_overlap: true\n");
  LocalCluster cluster(dir, options);
  ASSERT_TRUE(cluster.Start().ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/job.pbtxt", kJob).ok());
  absl::StatusOr<CommandResult> run =
      cluster.Psctl({"submit", dir + "/job.pbtxt", "--wait", "--timeout=120"},
                    absl::Seconds(140));
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->exit_code, 0)
      << run->out << run->err << cluster.Log("worker0");
  ASSERT_TRUE(absl::SimpleAtod(SummaryField(run->out, "test_accuracy"),
                               &result->test_accuracy))
      << run->out;
  const std::string job = SummaryField(run->out, "job");
  absl::StatusOr<JobParameters> read = ReadJobParameters(cluster, job, 2);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_GT(read->status.progress().step(), 0u);
  result->checksum = ParamChecksum(read->values);
  absl::Status stopped = cluster.Stop();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

TEST(CnnJobTest, TrainsAboveChanceAndIsBitwiseReproducible) {
  if (!std::filesystem::exists(std::string(kDataDir) +
                               "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed at " << kDataDir
                 << " (tools/setup.sh installs dataset-fashion-mnist)";
  }
  const std::string choices = TestDir("cnn_kernels") + "/choices.tsv";
  RunResult first, second;
  ASSERT_NO_FATAL_FAILURE(TrainOnce("cnn1", /*overlap=*/true, choices, &first));
  std::cout << "run 1: test accuracy " << first.test_accuracy << ", checksum "
            << first.checksum << std::endl;
  EXPECT_GE(first.test_accuracy, 0.70);
  std::string recorded;
  ASSERT_TRUE(ReadFile(choices, &recorded).ok()) << choices;
  std::cout << "kernel choices recorded by run 1:\n" << recorded;
  EXPECT_NE(recorded.find("conv 28x28x1 k5 f8"), std::string::npos);
  ASSERT_NO_FATAL_FAILURE(
      TrainOnce("cnn2", /*overlap=*/false, choices, &second));
  EXPECT_EQ(first.checksum, second.checksum)
      << "same seed, overlap on and off, different parameters";
  EXPECT_EQ(first.test_accuracy, second.test_accuracy);
}

}  // namespace
}  // namespace ps
