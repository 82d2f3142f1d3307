// The day-one job path over real daemons: psctl submit (bad and good specs),
// --wait, status, list, cancel, stats, and a coordinator that is down.
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/text_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

constexpr char kSyntheticJob[] = R"pb(
  name: "synthetic-mlp"
  model { mlp { input_dim: 784 hidden: 32 num_classes: 10 } }
  data {
    dataset: "synthetic"
    batch_size: 32
    epochs: 2
    synthetic_train: 4096
    synthetic_test: 512
  }
  optimizer { kind: SGD learning_rate: 0.05 momentum: 0.9 }
  consistency { mode: BSP step_deadline_ms: 30000 }
  num_workers: 2
  partition_bytes: 16384
  seed: 5
  eval_every: 50
)pb";

// Ten distinct mistakes in one spec; every one must be reported at once.
constexpr char kBadJob[] = R"pb(
  name: "bad name!"
  model { mlp { input_dim: 100 hidden: 0 num_classes: 10 } }
  data { dataset: "fashion-mnist" batch_size: 0 epochs: 0 }
  optimizer { kind: SGD learning_rate: -1 momentum: 1.5 nesterov: true }
  consistency { mode: BSP backup_workers: 2 }
  num_workers: 2
  partition_bytes: 1001
  tensors { name: "x" shape: 3 }
)pb";

class JobIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestDir(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    cluster_ = std::make_unique<LocalCluster>(dir_, LocalClusterOptions{});
    ASSERT_TRUE(cluster_->Start().ok());
  }
  void TearDown() override {
    absl::Status s = cluster_->Stop();
    EXPECT_TRUE(s.ok()) << s;
  }
  std::string WriteSpec(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    EXPECT_TRUE(WriteFileAtomically(path, text).ok());
    return path;
  }
  std::string dir_;
  std::unique_ptr<LocalCluster> cluster_;
};

TEST_F(JobIntegrationTest, SubmitWaitStatusListCancel) {
  // A bad spec: exit 2, every problem listed, nothing stored.
  absl::StatusOr<CommandResult> bad =
      cluster_->Psctl({"submit", WriteSpec("bad.pbtxt", kBadJob)});
  ASSERT_TRUE(bad.ok()) << bad.status();
  EXPECT_EQ(bad->exit_code, 2) << bad->out << bad->err;
  for (const char* field :
       {"name", "model.mlp.input_dim", "model.mlp.hidden[0]", "data.batch_size",
        "data.epochs", "optimizer.learning_rate", "optimizer.momentum",
        "consistency.backup_workers", "partition_bytes", "tensors"}) {
    EXPECT_THAT(bad->err, HasSubstr(std::string(field) + ":")) << bad->err;
  }

  // Dry run: valid, placed, not stored.
  absl::StatusOr<CommandResult> dry = cluster_->Psctl(
      {"submit", WriteSpec("job.pbtxt", kSyntheticJob), "--dry-run"});
  ASSERT_TRUE(dry.ok());
  EXPECT_EQ(dry->exit_code, 0) << dry->err;
  EXPECT_THAT(dry->out, HasSubstr("on 2 shards"));

  // A real job, followed to the end.
  absl::StatusOr<CommandResult> run = cluster_->Psctl(
      {"submit", dir_ + "/job.pbtxt", "--wait", "--timeout=120"},
      absl::Seconds(150));
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->exit_code, 0)
      << run->out << run->err << cluster_->Log("worker0");
  EXPECT_EQ(SummaryField(run->out, "state"), "SUCCEEDED") << run->out;
  double accuracy = 0, samples_per_s = 0, wall_s = 0;
  ASSERT_TRUE(
      absl::SimpleAtod(SummaryField(run->out, "test_accuracy"), &accuracy))
      << run->out;
  ASSERT_TRUE(absl::SimpleAtod(SummaryField(run->out, "samples_per_s"),
                               &samples_per_s));
  ASSERT_TRUE(absl::SimpleAtod(SummaryField(run->out, "wall_s"), &wall_s));
  EXPECT_GE(accuracy, 0.9) << "the synthetic set is separable";
  EXPECT_GT(samples_per_s, 0);
  EXPECT_GT(wall_s, 0);
  std::string job = SummaryField(run->out, "job");
  ASSERT_FALSE(job.empty());

  absl::StatusOr<CommandResult> status =
      cluster_->Psctl({"status", job, "--json"});
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->exit_code, 0);
  EXPECT_THAT(status->out, HasSubstr("\"state\": \"SUCCEEDED\""));

  // A long job, cancelled: CANCELLED with a reason, and the workers are
  // free again for the next job.
  std::string long_spec = kSyntheticJob;
  long_spec.replace(long_spec.find("epochs: 2"), 9, "epochs: 500");
  absl::StatusOr<CommandResult> submitted =
      cluster_->Psctl({"submit", WriteSpec("long.pbtxt", long_spec)});
  ASSERT_TRUE(submitted.ok());
  ASSERT_EQ(submitted->exit_code, 0) << submitted->err;
  std::string long_job = submitted->out.substr(submitted->out.find("job-"));
  long_job = long_job.substr(0, long_job.find_first_of(" \n"));
  absl::StatusOr<CommandResult> cancel = cluster_->Psctl({"cancel", long_job});
  ASSERT_TRUE(cancel.ok());
  EXPECT_EQ(cancel->exit_code, 0) << cancel->err;
  EXPECT_THAT(cancel->out, HasSubstr("CANCELLED"));
  absl::StatusOr<CommandResult> cancelled =
      cluster_->Psctl({"status", long_job});
  ASSERT_TRUE(cancelled.ok());
  EXPECT_THAT(cancelled->out, HasSubstr("CANCELLED"));
  EXPECT_THAT(cancelled->out, HasSubstr("cancelled by user"));

  absl::StatusOr<CommandResult> again = cluster_->Psctl(
      {"submit", dir_ + "/job.pbtxt", "--wait", "--timeout=120"},
      absl::Seconds(150));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->exit_code, 0) << again->out << again->err;

  absl::StatusOr<CommandResult> list = cluster_->Psctl({"list"});
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->exit_code, 0);
  EXPECT_THAT(list->out, HasSubstr(job));
  EXPECT_THAT(list->out, HasSubstr(long_job));
  EXPECT_THAT(list->out, HasSubstr("SUCCEEDED"));

  absl::StatusOr<CommandResult> stats = cluster_->Psctl({"stats"});
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->exit_code, 0) << stats->err;
  EXPECT_THAT(stats->out, HasSubstr("SHARD"));

  // Usage errors: exit 2.
  absl::StatusOr<CommandResult> usage = cluster_->Psctl({"frobnicate"});
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ(usage->exit_code, 2);
  absl::StatusOr<CommandResult> unknown =
      cluster_->Psctl({"status", "job-999999"});
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(unknown->exit_code, 2) << unknown->err;
}

TEST(PsctlTest, CoordinatorDownExitsThreeWithinFiveSeconds) {
  std::string dir = TestDir("coordinator_down");
  // Port 1 on loopback: nothing listens there.
  ASSERT_TRUE(WriteFileAtomically(dir + "/cluster.pbtxt",
                                  "shards { address: \"127.0.0.1:1\" }\n")
                  .ok());
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"list"}, {"status", "job-000001"}, {"stats"}}) {
    std::vector<std::string> argv = {"tools/psctl/psctl",
                                     "--cluster=" + dir + "/cluster.pbtxt"};
    argv.insert(argv.end(), args.begin(), args.end());
    absl::Time start = absl::Now();
    absl::StatusOr<CommandResult> r = RunCommand(argv, absl::Seconds(10));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->exit_code, 3) << args[0] << ": " << r->err;
    EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << args[0];
    EXPECT_THAT(r->err, HasSubstr("127.0.0.1:1")) << args[0];
  }
}

}  // namespace
}  // namespace ps
