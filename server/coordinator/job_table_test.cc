#include "server/coordinator/job_table.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

size_t NoneJoined(const JobTable::Job&) { return 0; }

JobSpec Spec(uint32_t num_workers,
             WorkerFailurePolicy policy = WORKER_FAILURE_UNSPECIFIED) {
  JobSpec spec;
  spec.set_name("softmax");
  spec.set_num_workers(num_workers);
  spec.set_on_worker_failure(policy);
  return spec;
}

// A job with `n` ranks held by w-1 .. w-n (names host-0 ..), RUNNING.
JobTable::Job& Running(JobTable& table, uint32_t n,
                       WorkerFailurePolicy policy = FAIL) {
  JobTable::Job& job = table.Add(Spec(n, policy), Placement(), kT0);
  EXPECT_EQ(table.PopStartable(n, NoneJoined), &job);
  std::vector<std::string> ids, names;
  for (uint32_t r = 0; r < n; ++r) {
    ids.push_back("w-" + std::to_string(r + 1));
    names.push_back("host-" + std::to_string(r));
  }
  JobTable::BeginRegistering(job, ids, names, 2);
  EXPECT_TRUE(JobTable::StopRegistering(job));
  JobTable::MarkRunning(job, kT0 + absl::Seconds(1));
  return job;
}

ProgressReport Report(const std::string& worker_id, uint32_t rank,
                      uint64_t step) {
  ProgressReport report;
  report.set_worker_id(worker_id);
  report.set_rank(rank);
  report.mutable_progress()->set_step(step);
  return report;
}

TEST(JobTableTest, AddNumbersJobsAndQueuesThemPending) {
  JobTable table;
  JobTable::Job& a = table.Add(Spec(2), Placement(), kT0);
  JobTable::Job& b = table.Add(Spec(1), Placement(), kT0);
  EXPECT_EQ(a.id(), "job-000001");
  EXPECT_EQ(b.id(), "job-000002");
  EXPECT_EQ(a.status.state(), PENDING);
  EXPECT_FLOAT_EQ(a.status.progress().test_accuracy(), -1);
  EXPECT_DOUBLE_EQ(a.status.submit_time_s(), 1700000000.0);
  EXPECT_EQ(table.Find("job-000002"), &b);
  EXPECT_EQ(table.Find("job-000003"), nullptr);
  absl::StatusOr<JobTable::Job*> missing = table.Get("job-000003");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("job_id"));
  ListJobsResponse list;
  table.List(&list);
  ASSERT_EQ(list.jobs_size(), 2);
  EXPECT_EQ(list.jobs(1).job_id(), "job-000002");
}

TEST(JobTableTest, PendingJobsStartInSubmitOrderAndSayWhyTheyWait) {
  JobTable table;
  JobTable::Job& big = table.Add(Spec(2), Placement(), kT0);
  JobTable::Job& small = table.Add(Spec(1), Placement(), kT0);
  EXPECT_EQ(table.PopStartable(1, NoneJoined),
            nullptr);  // the small one waits behind
  table.ExplainPending(1, NoneJoined);
  EXPECT_EQ(big.status.reason(), "waiting for workers: needs 2, 1 idle");
  EXPECT_EQ(small.status.reason(), "queued behind job-000001");
  EXPECT_EQ(table.PopStartable(2, NoneJoined), &big);
  JobTable::BeginRegistering(big, {"w-1", "w-2"}, {"a", "b"}, 3);
  EXPECT_TRUE(big.registering);
  EXPECT_EQ(big.status.reason(), "registering on 3 shards");
  EXPECT_THAT(big.status.workers(), ElementsAre("a", "b"));
  EXPECT_THAT(big.active, ElementsAre(0, 1));
  EXPECT_EQ(table.PopStartable(1, NoneJoined), &small);
  EXPECT_EQ(table.PopStartable(100, NoneJoined), nullptr);
}

JobSpec CustomSpec(const std::string& name, uint32_t num_workers) {
  JobSpec spec = Spec(num_workers);
  spec.set_name(name);
  TensorSpec* t = spec.mutable_model()->mutable_custom()->add_tensors();
  t->set_name("w");
  t->add_shape(4);
  return spec;
}

TEST(JobTableTest, CustomJobsStartWithTheirJoinedWorkersOutOfQueueOrder) {
  JobTable table;
  JobTable::Job& builtin = table.Add(Spec(2), Placement(), kT0);
  JobTable::Job& custom = table.Add(CustomSpec("torch", 2), Placement(), kT0);
  JobTable::Job& queued = table.Add(Spec(1), Placement(), kT0);
  size_t joined = 1;
  const JobTable::JoinedCount count = [&](const JobTable::Job& job) {
    return &job == &custom ? joined : 0;
  };
  // Idle workers that joined no job never count for the custom one.
  EXPECT_EQ(table.PopStartable(1, count), nullptr);
  table.ExplainPending(1, count);
  EXPECT_EQ(builtin.status.reason(), "waiting for workers: needs 2, 1 idle");
  EXPECT_EQ(custom.status.reason(),
            "waiting for workers to join: needs 2, 1 joined");
  EXPECT_EQ(queued.status.reason(), "queued behind job-000001");
  // Its joined workers start it although an older job waits.
  joined = 2;
  EXPECT_EQ(table.PopStartable(1, count), &custom);
  EXPECT_EQ(table.PopStartable(1, count), nullptr);  // queued stays behind
  EXPECT_EQ(table.PopStartable(2, count), &builtin);
  EXPECT_EQ(table.PopStartable(1, count), &queued);
}

TEST(JobTableTest, FindLiveFindsTheNewestJobOfANameNotEnded) {
  JobTable table;
  JobTable::Job& first = table.Add(CustomSpec("torch", 1), Placement(), kT0);
  EXPECT_EQ(table.FindLive("torch"), &first);
  EXPECT_EQ(table.FindLive("other"), nullptr);
  table.End(first, {CANCELLED, "cancelled by user"}, kT0);
  EXPECT_EQ(table.FindLive("torch"), nullptr);
  JobTable::Job& second = table.Add(CustomSpec("torch", 1), Placement(), kT0);
  EXPECT_EQ(table.FindLive("torch"), &second);
}

TEST(JobTableTest, EndSaysWhetherTheJobHadLeftTheQueue) {
  JobTable table;
  JobTable::Job& pending = table.Add(Spec(1), Placement(), kT0);
  EXPECT_FALSE(table.End(pending, {CANCELLED, "cancelled by user"},
                         kT0 + absl::Seconds(5)));
  EXPECT_TRUE(pending.Ended());
  EXPECT_EQ(pending.status.reason(), "cancelled by user");
  EXPECT_DOUBLE_EQ(pending.status.end_time_s(), 1700000005.0);
  EXPECT_EQ(table.PopStartable(1, NoneJoined), nullptr);  // no longer queued

  JobTable::Job& running = Running(table, 1);
  EXPECT_TRUE(table.End(running, {FAILED, "boom"}, kT0));
  EXPECT_EQ(running.status.state(), FAILED);
}

TEST(JobTableTest, StopRegisteringAfterAnEndSaysNotStarting) {
  JobTable table;
  JobTable::Job& job = table.Add(Spec(1), Placement(), kT0);
  ASSERT_EQ(table.PopStartable(1, NoneJoined), &job);
  JobTable::BeginRegistering(job, {"w-1"}, {"a"}, 1);
  EXPECT_TRUE(table.End(job, {CANCELLED, "cancelled by user"}, kT0));
  EXPECT_FALSE(JobTable::StopRegistering(job));
  EXPECT_FALSE(job.registering);
}

TEST(JobTableTest, LoseRankUnderFailEndsTheJob) {
  JobTable table;
  JobTable::Job& job = Running(table, 2, FAIL);
  std::optional<JobEnd> end = JobTable::LoseRank(job, 1, "w-2 lost");
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(end->state, FAILED);
  EXPECT_EQ(end->reason, "w-2 lost");
  EXPECT_EQ(job.rank_worker[1], "");
}

TEST(JobTableTest, LoseRankUnderShrinkContinuesUntilNoRankIsLeft) {
  JobTable table;
  JobTable::Job& job = Running(table, 3, SHRINK);
  EXPECT_FALSE(JobTable::LoseRank(job, 0, "w-1 lost").has_value());
  EXPECT_THAT(job.active, ElementsAre(1, 2));
  EXPECT_EQ(job.Leader(), 1u);
  EXPECT_EQ(job.status.reason(), "shrunk: w-1 lost");
  EXPECT_FALSE(JobTable::LoseRank(job, 2, "w-3 lost").has_value());
  std::optional<JobEnd> end = JobTable::LoseRank(job, 1, "w-2 lost");
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(end->state, FAILED);
  EXPECT_EQ(end->reason, "every worker lost; last: w-2 lost");
}

TEST(JobTableTest, LoseRankSucceedsWhenTheNewLeaderHadFinished) {
  JobTable table;
  JobTable::Job& job = Running(table, 2, SHRINK);
  ProgressReport report = Report("w-1", 0, 99);
  EXPECT_FALSE(JobTable::ApplyReport(job, report).has_value());
  report = Report("w-2", 1, 100);
  report.set_finished(true);
  EXPECT_FALSE(JobTable::ApplyReport(job, report).has_value());  // not leader
  std::optional<JobEnd> end = JobTable::LoseRank(job, 0, "w-1 lost");
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(end->state, SUCCEEDED);
  EXPECT_EQ(end->reason, "finished at step 99, test accuracy 0.0000");
}

// Under ASP the leader may finish first: the job waits for the others'
// last steps, and a finished rank whose worker exits is no loss.
TEST(JobTableTest, SucceedsOnlyOnceEveryActiveRankFinished) {
  for (WorkerFailurePolicy policy : {FAIL, SHRINK}) {
    SCOPED_TRACE(WorkerFailurePolicy_Name(policy));
    JobTable table;
    JobTable::Job& job = Running(table, 3, policy);
    ProgressReport report = Report("w-1", 0, 100);
    report.set_finished(true);
    EXPECT_FALSE(JobTable::ApplyReport(job, report).has_value());
    EXPECT_EQ(job.status.reason(),
              "the leader finished; waiting for ranks [1, 2] to finish their "
              "steps");
    EXPECT_FALSE(JobTable::LoseRank(job, 0, "w-1 left").has_value());
    report = Report("w-3", 2, 97);
    report.set_finished(true);
    EXPECT_FALSE(JobTable::ApplyReport(job, report).has_value());
    report = Report("w-2", 1, 98);
    report.set_finished(true);
    std::optional<JobEnd> end = JobTable::ApplyReport(job, report);
    ASSERT_TRUE(end.has_value());
    EXPECT_EQ(end->state, SUCCEEDED);
    EXPECT_EQ(end->reason, "finished at step 100, test accuracy 0.0000");
  }
}

TEST(JobTableTest, SamplesPerSecondFollowsTheLiveRanks) {
  JobTable table;
  JobTable::Job& job = Running(table, 4, SHRINK);
  ProgressReport report = Report("w-1", 0, 10);
  report.mutable_progress()->set_samples_per_s(400);  // 4 x 100
  EXPECT_FALSE(JobTable::ApplyReport(job, report).has_value());
  EXPECT_FLOAT_EQ(job.status.progress().samples_per_s(), 400);
  JobTable::LoseRank(job, 3, "w-4 lost");
  EXPECT_FLOAT_EQ(job.status.progress().samples_per_s(), 300);
  JobTable::LoseRank(job, 2, "w-3 lost");
  EXPECT_FLOAT_EQ(job.status.progress().samples_per_s(), 200);
  JobTable::Rejoin(job, 2, "w-5", 10);
  EXPECT_FLOAT_EQ(job.status.progress().samples_per_s(), 300);
}

TEST(JobTableTest, RejoinFindsTheLostRankByName) {
  JobTable table;
  JobTable::Job& job = Running(table, 2, SHRINK);
  EXPECT_FALSE(table.FindRejoin("host-1").has_value());  // still held
  JobTable::LoseRank(job, 1, "w-2 lost");
  EXPECT_FALSE(table.FindRejoin("host-9").has_value());
  auto found = table.FindRejoin("host-1");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->first, &job);
  EXPECT_EQ(found->second, 1u);
  JobTable::Rejoin(job, 1, "w-3", 42);
  EXPECT_EQ(job.rank_worker[1], "w-3");
  EXPECT_THAT(job.active, ElementsAre(0, 1));
  EXPECT_EQ(job.status.reason(),
            "worker w-3 (rank 1, host-1) rejoined at step 42");
}

TEST(JobTableTest, CheckReportSaysWhyAReportIsRefused) {
  JobTable table;
  JobTable::Job& job = Running(table, 2);
  absl::StatusOr<std::string> check =
      JobTable::CheckReport(job, Report("w-1", 0, 1));
  ASSERT_TRUE(check.ok());
  EXPECT_EQ(*check, "");
  check = JobTable::CheckReport(job, Report("w-1", 2, 1));
  EXPECT_EQ(check.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(check.status().message(), HasSubstr("rank: 2 out of range"));
  check = JobTable::CheckReport(job, Report("w-7", 1, 1));
  ASSERT_TRUE(check.ok());
  EXPECT_EQ(*check,
            "worker w-7 does not hold rank 1 of job job-000001 (lost or "
            "replaced)");
  table.End(job, {CANCELLED, "cancelled by user"}, kT0);
  check = JobTable::CheckReport(job, Report("w-1", 0, 1));
  ASSERT_TRUE(check.ok());
  EXPECT_EQ(*check, "job job-000001 is CANCELLED: cancelled by user");
}

TEST(JobTableTest, ApplyReportFailsOnErrorAndSucceedsOnLeaderFinish) {
  JobTable table;
  JobTable::Job& job = Running(table, 2);
  ProgressReport error = Report("w-2", 1, 3);
  error.set_error("loss is NaN at step 3");
  std::optional<JobEnd> end = JobTable::ApplyReport(job, error);
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(end->state, FAILED);
  EXPECT_EQ(end->reason,
            "worker w-2 (rank 1, host-1) failed: loss is NaN at step 3");

  JobTable::Job& next = Running(table, 1);
  ProgressReport done = Report("w-1", 0, 100);
  done.mutable_progress()->set_test_accuracy(0.84f);
  done.set_finished(true);
  end = JobTable::ApplyReport(next, done);
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(end->state, SUCCEEDED);
  EXPECT_EQ(end->reason, "finished at step 100, test accuracy 0.8400");
  EXPECT_TRUE(next.rank_finished[0]);
}

}  // namespace
}  // namespace ps
