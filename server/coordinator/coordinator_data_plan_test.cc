// JobCoordinator::GetDataPlan: an elastic data job's plan, sealed by its
// workers' asks; a joiner waits for the next epoch, where the split and the
// quorum change together (the membership reaches the shards before the
// answer).
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/testing/coordinator_test_fixture.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class DataPlanTest : public CoordinatorTest {
 protected:
  absl::Status Scale(const std::string& job, uint32_t workers) {
    ScaleJobRequest request;
    request.set_job_id(job);
    request.set_workers(workers);
    ScaleJobResponse response;
    return coord_->ScaleJob(request, &response);
  }
  absl::StatusOr<GetDataPlanResponse> Plan(const std::string& worker,
                                           uint64_t step,
                                           uint64_t examples = 600) {
    GetDataPlanRequest request;
    request.set_worker_id(worker);
    request.set_step(step);
    request.set_train_examples(examples);
    GetDataPlanResponse response;
    absl::Status s = coord_->GetDataPlan(request, &response);
    if (!s.ok()) return s;
    return response;
  }
};

TEST_F(DataPlanTest, AJoinerReadsAndCountsFromTheNextEpoch) {
  const std::string a = Register("host-a");
  const std::string b = Register("host-b");
  const std::string job = Submit(ElasticMlp());
  ASSERT_EQ(Job(job).state(), RUNNING);
  ASSERT_TRUE(Assigned(a).has_value());
  EXPECT_TRUE(Assigned(a)->elastic_data());
  shards_.TakeCalls();

  absl::StatusOr<GetDataPlanResponse> p = Plan(a, 0);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->segment().ranks(), ElementsAre(0, 1));
  EXPECT_EQ(p->planned_until(), 9u);

  ASSERT_TRUE(Scale(job, 3).ok());
  const std::string c = Register("host-c");
  ASSERT_TRUE(Assigned(c).has_value());
  EXPECT_EQ(Assigned(c)->rank(), 2u);
  EXPECT_EQ(Assigned(c)->start_step(), 9u);  // the next epoch
  EXPECT_TRUE(shards_.TakeCalls().empty());  // not in the quorum yet
  EXPECT_EQ(Job(job).scale().active_workers(), 2u);

  // The joiner may not seal epoch 1; a worker of epoch 0 does.
  EXPECT_EQ(Plan(c, 9).status().code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE(Plan(b, 5).ok());
  EXPECT_TRUE(shards_.TakeCalls().empty());
  p = Plan(b, 9);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->segment().epoch(), 1u);
  EXPECT_EQ(p->segment().start_step(), 9u);
  EXPECT_THAT(p->segment().ranks(), ElementsAre(0, 1, 2));
  EXPECT_EQ(p->planned_until(), 15u);
  EXPECT_THAT(shards_.TakeCalls(),
              ElementsAre("membership 0 job-000001 [0,1,2]",
                          "membership 1 job-000001 [0,1,2]"));
  EXPECT_EQ(Job(job).scale().active_workers(), 3u);
  EXPECT_GT(Job(job).scale().reached_s(), 0);
  p = Plan(c, 9);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->segment().start_step(), 9u);
  EXPECT_EQ(Job(job).data_plan().segments_size(), 2);

  // Epoch 2 is past data.epochs: the job's steps end at 15.
  p = Plan(c, 15);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->done());
}

TEST_F(DataPlanTest, ALeaverReadsToTheEpochsEndAndLeavesTheQuorumThere) {
  const std::string a = Register("host-a");
  const std::string b = Register("host-b");
  const std::string job = Submit(ElasticMlp());
  shards_.TakeCalls();
  ASSERT_TRUE(Plan(a, 0).ok());
  ASSERT_TRUE(Scale(job, 1).ok());
  EXPECT_EQ(Beat(b).leave_job(), "");  // no heartbeat leave: the plan says
  // Rank 1 still reads epoch 0; at step 9 the plan leaves it out.
  absl::StatusOr<GetDataPlanResponse> p = Plan(b, 8);
  ASSERT_TRUE(p.ok());
  EXPECT_THAT(p->segment().ranks(), ElementsAre(0, 1));
  p = Plan(a, 9);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->segment().ranks(), ElementsAre(0));
  EXPECT_THAT(shards_.TakeCalls(), ElementsAre("membership 0 job-000001 [0]",
                                               "membership 1 job-000001 [0]"));
  EXPECT_EQ(Job(job).scale().active_workers(), 1u);
  p = Plan(b, 9);
  ASSERT_TRUE(p.ok());
  EXPECT_THAT(p->segment().ranks(), ElementsAre(0));
}

TEST_F(DataPlanTest, BadAsksAreRefusedNamingTheFieldAndChangeNothing) {
  const std::string a = Register("host-a");
  Register("host-b");
  const std::string job = Submit(ElasticMlp());
  ASSERT_TRUE(Plan(a, 0).ok());
  const std::string before = Job(job).data_plan().SerializeAsString();
  absl::Status s = Plan(a, 10).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("step: 10"));
  s = Plan(a, 3, 601).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("train_examples"));
  s = Plan("w-99", 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("worker_id"));
  EXPECT_EQ(Job(job).data_plan().SerializeAsString(), before);

  // data_rescale on a job that is not elastic: refused at submit.
  JobSpec plain = Spec(1, SHRINK);
  plain.set_data_rescale(DATA_RESCALE_AT_ONCE);
  SubmitJobRequest request;
  *request.mutable_spec() = plain;
  SubmitJobResponse response;
  EXPECT_FALSE(coord_->SubmitJob(request, &response).ok());
  ASSERT_GT(response.problems_size(), 0);
  EXPECT_THAT(response.problems(0), HasSubstr("data_rescale"));
}

}  // namespace
}  // namespace ps
