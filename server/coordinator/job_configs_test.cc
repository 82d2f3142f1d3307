// Every job config the project ships (configs/jobs/*.pbtxt) parses and
// passes the coordinator's validation, so a README or docs command that
// submits one is not refused. Files are taken as they are on the machine
// that runs them: the data paths they name are assumed to exist.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "server/coordinator/job_validation.h"

namespace ps {
namespace {

std::string JobsDir() {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/",
                      std::getenv("TEST_WORKSPACE"), "/configs/jobs");
}

TEST(JobConfigsTest, EveryShippedJobValidates) {
  ValidationContext ctx;
  ctx.num_shards = 4;  // the largest shipped config wants 4 shards' memory
  ctx.path_exists = [](const std::string&) { return true; };
  std::vector<std::string> seen;
  for (const auto& entry : std::filesystem::directory_iterator(JobsDir())) {
    const std::string path = entry.path().string();
    if (entry.path().extension() != ".pbtxt") continue;
    seen.push_back(entry.path().filename().string());
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    JobSpec spec;
    ASSERT_TRUE(
        google::protobuf::TextFormat::ParseFromString(text.str(), &spec))
        << path;
    const std::vector<std::string> problems = ValidateJobSpec(spec, ctx);
    EXPECT_TRUE(problems.empty())
        << path << ": " << absl::StrJoin(problems, "; ");
  }
  // The glob found them (a renamed folder would pass vacuously).
  EXPECT_THAT(seen, ::testing::Contains("fashion_mlp.pbtxt"));
  EXPECT_THAT(seen, ::testing::Contains("ctr_synthetic_55m_rows.pbtxt"));
  EXPECT_GE(seen.size(), 8u);
}

}  // namespace
}  // namespace ps
