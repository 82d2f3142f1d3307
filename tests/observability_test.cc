// The coordinator's status page in a real browser and psctl curves, over
// real daemons: while a job runs, Debian's chromium (headless) loads the
// page and the test asserts on the DOM its script rendered (the job's row,
// a curve's SVG path, the shards); psctl curves writes the job's curve as
// CSV and PNG. The browser part skips, saying so, where chromium is missing;
// the PNG part where /usr/bin/python3 has no matplotlib.
#include <unistd.h>

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/text_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"
#include "tests/testing/cluster_fixture.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

constexpr char kChromium[] = "/usr/bin/chromium";
constexpr char kPython[] = "/usr/bin/python3";

// Long enough (many epochs of a small synthetic set) to be running while the
// browser looks; cancelled at the end.
constexpr char kJob[] = R"pb(
  name: "observed-mlp"
  model { mlp { input_dim: 784 hidden: 32 num_classes: 10 } }
  data {
    dataset: "synthetic"
    batch_size: 32
    epochs: 1000
    synthetic_train: 4096
    synthetic_test: 512
  }
  optimizer { kind: SGD learning_rate: 0.05 momentum: 0.9 }
  consistency { mode: BSP step_deadline_ms: 30000 }
  num_workers: 2
  partition_bytes: 16384
  seed: 5
  eval_every: 100
)pb";

class ObservabilityTest : public ClusterTest {
 protected:
  LocalClusterOptions ClusterOptions() const override {
    LocalClusterOptions options;
    options.psd_extra =
        "status_address: \"127.0.0.1:0\"\n"
        "status_address_file: \"status.addr\"\n";
    return options;
  }
  void SetUp() override {
    ClusterTest::SetUp();
    if (HasFatalFailure()) return;
    absl::StatusOr<std::string> address =
        WaitForFile(dir_ + "/status.addr", absl::Seconds(30));
    ASSERT_TRUE(address.ok()) << address.status();
    status_address_ = std::string(absl::StripAsciiWhitespace(*address));
  }

  // Submits kJob and waits (bounded) until the coordinator has points of
  // its curve; returns the job id.
  std::string SubmitAndWaitForProgress() {
    const std::string job = Submit(kJob);
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (absl::Now() < deadline) {
      absl::StatusOr<CommandResult> csv =
          cluster_->Psctl({"curves", job, "-o", dir_ + "/probe.csv"});
      if (csv.ok() && csv->exit_code == 0) return job;
      // The leader reports every few hundred ms: poll at that pace.
      absl::SleepFor(absl::Milliseconds(200));
    }
    ADD_FAILURE() << "no progress from " << job << " within 60 s";
    return job;
  }

  std::string status_address_;
};

TEST_F(ObservabilityTest, BrowserRendersTheRunningJobAndItsCurve) {
  const std::string job = SubmitAndWaitForProgress();
  if (access(kChromium, X_OK) != 0) {
    cluster_->Psctl({"cancel", job}).IgnoreError();
    GTEST_SKIP() << kChromium
                 << " is missing (apt install chromium): the status page "
                    "was not loaded in a browser";
  }
  // --virtual-time-budget lets the page's script fetch and render before
  // the DOM is dumped.
  absl::StatusOr<CommandResult> dom =
      RunCommand({kChromium, "--headless", "--disable-gpu", "--no-sandbox",
                  "--no-first-run", "--user-data-dir=" + dir_ + "/chromium",
                  "--virtual-time-budget=5000", "--dump-dom",
                  absl::StrCat("http://", status_address_, "/")},
                 absl::Seconds(90));
  ASSERT_TRUE(dom.ok()) << dom.status();
  ASSERT_EQ(dom->exit_code, 0) << dom->err;
  const std::string& html = dom->out;
  EXPECT_THAT(html, HasSubstr(absl::StrCat("<tr data-job=\"", job, "\">")));
  EXPECT_THAT(html, HasSubstr("observed-mlp"));
  EXPECT_THAT(html, HasSubstr(">RUNNING<"));
  // The curve: an SVG for the job with a loss path of at least one segment.
  EXPECT_THAT(
      html, HasSubstr(absl::StrCat("class=\"curve\" data-job=\"", job, "\"")));
  const size_t path = html.find("<path class=\"loss\" d=\"M");
  ASSERT_NE(path, std::string::npos) << html;
  EXPECT_NE(html.find('L', path), std::string::npos);
  // Both shards answered Stats.
  EXPECT_THAT(html, HasSubstr("<tr data-shard=\"0\">"));
  EXPECT_THAT(html, HasSubstr("<tr data-shard=\"1\">"));
  EXPECT_THAT(html, ::testing::Not(HasSubstr("unreachable")));
  EXPECT_TRUE(cluster_->Psctl({"cancel", job}).ok());
}

TEST_F(ObservabilityTest, CurvesAsCsvAndPng) {
  const std::string job = SubmitAndWaitForProgress();
  const std::string csv = dir_ + "/curves.csv";
  absl::StatusOr<CommandResult> r = cluster_->Psctl({"curves", job, "-o", csv});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << r->err;
  absl::StatusOr<std::string> text = WaitForFile(csv, absl::Seconds(1));
  ASSERT_TRUE(text.ok()) << text.status();
  std::vector<std::string> lines =
      absl::StrSplit(*text, '\n', absl::SkipEmpty());
  ASSERT_GE(lines.size(), 2u);
  EXPECT_TRUE(absl::StartsWith(lines[0], "job,name,step,epoch,loss,"));
  EXPECT_TRUE(absl::StartsWith(lines[1], job + ",observed-mlp,")) << lines[1];

  // Unknown job: exit 1 naming it.
  r = cluster_->Psctl({"curves", "job-999999", "-o", csv});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_THAT(r->err, HasSubstr("job-999999"));

  if (RunCommand({kPython, "-c", "import matplotlib"}, absl::Seconds(30))
          .value_or(CommandResult())
          .exit_code != 0) {
    cluster_->Psctl({"cancel", job}).IgnoreError();
    GTEST_SKIP() << kPython << " has no matplotlib (apt install "
                 << "python3-matplotlib): the PNG was not drawn";
  }
  const std::string png = dir_ + "/curves.png";
  r = cluster_->Psctl({"curves", job, "-o", png});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->exit_code, 0) << r->err;
  absl::StatusOr<std::string> image = WaitForFile(png, absl::Seconds(1));
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_TRUE(absl::StartsWith(*image, "\x89PNG\r\n\x1a\n"));
  EXPECT_TRUE(cluster_->Psctl({"cancel", job}).ok());
}

}  // namespace
}  // namespace ps
