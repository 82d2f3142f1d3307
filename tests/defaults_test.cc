// The defaults as the binaries and the coordinator apply them: a workerd
// whose devices this build or machine cannot drive stops at start (exit 2,
// naming the device), and a minimal job spec gets common/defaults.h's values.
#include "common/defaults.h"

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/time/time.h"
#include "common/text_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/job.pb.h"
#include "server/coordinator/job_validation.h"
#include "tests/subprocess.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

std::string TempDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

// No machine has 4096 GPUs: the check fails with or without CUDA.
TEST(WorkerdDevicesTest, UnusableGpuStopsWorkerdWithExitCode2) {
  const std::filesystem::path dir = TempDir();
  ASSERT_TRUE(WriteFileAtomically((dir / "cluster.pbtxt").string(),
                                  "shards { address: \"127.0.0.1:1\" }\n")
                  .ok());
  const std::string config = (dir / "workerd.pbtxt").string();
  ASSERT_TRUE(WriteFileAtomically(config,
                                  "cluster_file: \"cluster.pbtxt\"\n"
                                  "devices: \"cpu:0\" devices: \"gpu:4096\"\n")
                  .ok());
  absl::StatusOr<CommandResult> r =
      RunCommand({"worker/workerd", "--config=" + config}, absl::Seconds(20));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 2) << r->err;
  EXPECT_THAT(r->err, HasSubstr("workerd: devices[1] \"gpu:4096\": "));
}

TEST(JobDefaultsTest, MinimalJobSpecGetsTheDefaults) {
  JobSpec spec;
  ASSERT_TRUE(ParseTextProto("name: \"j\" num_workers: 1 "
                             "model { softmax { input_dim: 4 num_classes: 2 } }"
                             " data { dataset: \"synthetic\" batch_size: 8 }"
                             " optimizer { kind: SGD learning_rate: 0.1 }",
                             "job.pbtxt", &spec)
                  .ok());
  const JobSpec filled = ApplyJobDefaults(spec);
  EXPECT_EQ(filled.partition_bytes(), kDefaultPartitionBytes);
  EXPECT_EQ(filled.consistency().step_deadline_ms(), kDefaultStepDeadlineMs);
  EXPECT_EQ(filled.on_worker_failure(), FAIL);
}

}  // namespace
}  // namespace ps
