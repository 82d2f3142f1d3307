// Tests of psctl scale's command line (refused before any call) and the
// lines psctl status prints (FormatReshard, FormatProgress).
#include "tools/psctl/psctl_jobs.h"

#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "tools/psctl/psctl_common.h"

namespace ps {
namespace psctl {
namespace {

using ::testing::HasSubstr;

TEST(FormatReshardTest, CountsForTheFirstShardsAndSetsForADrain) {
  ReshardStatus s;
  EXPECT_EQ(FormatReshard(s), "");
  s.set_from_shards(3);
  s.set_target_shards(2);
  s.set_phase("done");
  EXPECT_EQ(FormatReshard(s), "shards: 3 -> 2, done");
  for (uint32_t id : {0, 1, 2}) s.add_from_shard_ids(id);
  for (uint32_t id : {0, 2}) s.add_target_shard_ids(id);
  s.set_moved_chunks(3);
  s.set_moved_bytes(1500000);
  EXPECT_EQ(FormatReshard(s),
            "shards: [0 1 2] -> [0 2], done; 3 chunks (1.5 MB) move");
  // With the bytes the shards fetched, a job's table rows included.
  s.set_pause_step(40);
  s.set_fetched_bytes(61500000);
  EXPECT_EQ(FormatReshard(s),
            "shards: [0 1 2] -> [0 2], done; 3 chunks (1.5 MB) move at step "
            "40, 61.5 MB fetched");
  // A shard restarted between the store's commit and its own COMMIT.
  s.add_late_shards(1);
  EXPECT_THAT(FormatReshard(s), HasSubstr("fetched; shards 1 committed late"));
}

// A Python worker's job reports no total and may report no loss (NaN):
// "step 936", "loss -"; a built-in job keeps "step 5/10" and its loss.
TEST(FormatProgressTest, UnknownTotalAndUnmeasuredLoss) {
  JobStatus j;
  j.set_job_id("job-000001");
  j.set_state(RUNNING);
  j.mutable_progress()->set_step(936);
  j.mutable_progress()->set_loss(std::numeric_limits<float>::quiet_NaN());
  j.mutable_progress()->set_test_accuracy(-1);
  EXPECT_THAT(
      FormatProgress(j),
      HasSubstr("job-000001 RUNNING step 936 epoch 0 loss - test_acc -"));
  j.mutable_progress()->set_total_steps(1000);
  j.mutable_progress()->set_loss(0.25f);
  EXPECT_THAT(FormatProgress(j),
              HasSubstr("step 936/1000 epoch 0 loss 0.2500"));
}

TEST(ScaleTest, BadFlagsExitTwoBeforeAnyCall) {
  const std::vector<std::vector<std::string>> bad = {
      {"--drain=x"},
      {"--drain=1,"},
      {"--drain="},
      {"--drain=-1"},
      {"--shards=0"},
      {"--workers=2", "--drain=1"},
      {"--shards=2", "--drain=1"},
  };
  for (const std::vector<std::string>& flags : bad) {
    std::vector<std::string> raw = {"scale", "job-000001"};
    raw.insert(raw.end(), flags.begin(), flags.end());
    Args a;
    ASSERT_TRUE(ParseArgs(raw, &a).ok()) << flags[0];
    std::ostringstream out, err;
    EXPECT_EQ(Scale(a, out, err), kExitUsage) << flags[0];
    EXPECT_THAT(err.str(), HasSubstr("--drain=K[,K2...]"));
    EXPECT_EQ(out.str(), "");
  }
}

}  // namespace
}  // namespace psctl
}  // namespace ps
