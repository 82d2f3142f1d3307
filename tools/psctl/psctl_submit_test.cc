// Tests of the summary line of `psctl submit --wait` (FormatSummary).
#include "tools/psctl/psctl_submit.h"

#include <string>

#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"

namespace ps {
namespace psctl {
namespace {

// A finished job with every progress field set; a dense (mlp) or ctr model.
JobStatus FinishedJob(bool ctr) {
  JobStatus j;
  j.set_job_id("job-000001");
  j.set_state(SUCCEEDED);
  j.set_reason("done \"early\"");
  if (ctr) {
    j.mutable_spec()->mutable_model()->mutable_ctr()->set_table("emb");
  } else {
    j.mutable_spec()->mutable_model()->mutable_mlp();
  }
  j.set_submit_time_s(100);
  j.set_end_time_s(112.5);
  Progress* p = j.mutable_progress();
  p->set_step(4680);
  p->set_loss(0.2112f);
  p->set_test_accuracy(ctr ? -1 : 0.8828f);
  p->set_samples_per_s(44608.4f);
  p->set_data_s(1.25);
  p->set_compute_s(8.5);
  p->set_comm_s(2);
  p->set_overlap(true);
  p->set_elapsed_s(12);
  p->set_test_auc(ctr ? 0.75f : -1);
  p->set_test_logloss(ctr ? 0.4625f : -1);
  p->set_teacher_auc(ctr ? 0.8125f : -1);
  return j;
}

TEST(FormatSummaryTest, DenseJobHasAccuracyAndNoAuc) {
  EXPECT_EQ(FormatSummary(FinishedJob(/*ctr=*/false)),
            "job=job-000001 state=SUCCEEDED test_accuracy=0.8828 loss=0.2112 "
            "steps=4680 samples_per_s=44608 data_s=1.25 compute_s=8.50 "
            "comm_s=2.00 overlap=1 train_s=12.00 wall_s=12.50 "
            "reason=\"done 'early'\"");
}

TEST(FormatSummaryTest, CtrJobHasAucAndNoAccuracy) {
  EXPECT_EQ(FormatSummary(FinishedJob(/*ctr=*/true)),
            "job=job-000001 state=SUCCEEDED loss=0.2112 steps=4680 "
            "samples_per_s=44608 data_s=1.25 compute_s=8.50 comm_s=2.00 "
            "overlap=1 train_s=12.00 wall_s=12.50 test_auc=0.7500 "
            "test_logloss=0.4625 teacher_auc=0.8125 reason=\"done 'early'\"");
}

TEST(FormatSummaryTest, CtrJobWithTableTraffic) {
  JobStatus j = FinishedJob(/*ctr=*/true);
  SparseProgress* s = j.mutable_progress()->mutable_sparse();
  s->set_rows_pushed(5000);
  s->set_rows_pulled(2000);
  s->set_row_cache_hits(3000);
  EXPECT_EQ(FormatSummary(j),
            "job=job-000001 state=SUCCEEDED loss=0.2112 steps=4680 "
            "samples_per_s=44608 data_s=1.25 compute_s=8.50 comm_s=2.00 "
            "overlap=1 train_s=12.00 wall_s=12.50 test_auc=0.7500 "
            "test_logloss=0.4625 teacher_auc=0.8125 table_rows_pushed=5000 "
            "table_rows_pulled=2000 row_cache_hits=3000 "
            "reason=\"done 'early'\"");
}

// -1 in Progress: the value does not exist, so the field is left out.
TEST(FormatSummaryTest, AbsentMetricsAreLeftOut) {
  struct Case {
    const char* name;
    bool ctr;
    void (*unset)(Progress*);
    const char* absent;
    const char* present;  // "" when nothing else of the kind remains
  };
  const Case cases[] = {
      {"dense, not evaluated", false,
       [](Progress* p) { p->set_test_accuracy(-1); }, " test_accuracy=", ""},
      {"ctr, no teacher", true, [](Progress* p) { p->set_teacher_auc(-1); },
       " teacher_auc=", " test_auc=0.7500 test_logloss=0.4625 reason="},
      {"ctr, not evaluated", true,
       [](Progress* p) {
         p->set_test_auc(-1);
         p->set_test_logloss(-1);
       },
       " test_auc=", " wall_s=12.50 teacher_auc=0.8125 reason="},
  };
  for (const Case& c : cases) {
    JobStatus j = FinishedJob(c.ctr);
    c.unset(j.mutable_progress());
    const std::string line = FormatSummary(j);
    EXPECT_EQ(line.find(c.absent), std::string::npos) << c.name << ": " << line;
    EXPECT_NE(line.find(c.present), std::string::npos)
        << c.name << ": " << line;
    EXPECT_NE(line.find(" loss=0.2112 steps=4680 "), std::string::npos)
        << c.name << ": " << line;
  }
}

// A running job (no end time) reports its elapsed time as wall_s.
TEST(FormatSummaryTest, WallTimeFallsBackToElapsed) {
  JobStatus j = FinishedJob(/*ctr=*/false);
  j.clear_end_time_s();
  j.set_state(RUNNING);
  EXPECT_NE(FormatSummary(j).find(" train_s=12.00 wall_s=12.00 "),
            std::string::npos)
      << FormatSummary(j);
}

}  // namespace
}  // namespace psctl
}  // namespace ps
