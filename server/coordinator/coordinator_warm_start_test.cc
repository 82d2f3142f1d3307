// JobCoordinator tests. SUCCEEDED jobs on the shards (succeeded_jobs_kept)
// and warm starts from one of them (JobSpec.init.from_job) checked at
// submit.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/testing/coordinator_test_fixture.h"
#include "server/coordinator/testing/fake_shard_control.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class SucceededJobsTest : public CoordinatorTest {
 protected:
  // Runs one job of `spec` on worker_ to SUCCEEDED; returns its id.
  std::string RunToSuccess(const JobSpec& spec) {
    const std::string job = Submit(spec);
    EXPECT_EQ(Job(job).state(), RUNNING);
    Report(worker_, job, 0, 1, /*finished=*/true);
    EXPECT_EQ(Job(job).state(), SUCCEEDED);
    clock_.Advance(absl::Seconds(1));
    return job;
  }

  absl::Status SubmitFromJob(const std::string& source, JobSpec spec,
                             SubmitJobResponse* response) {
    spec.mutable_init()->set_from_job(source);
    SubmitJobRequest request;
    *request.mutable_spec() = spec;
    return coord_->SubmitJob(request, response);
  }

  std::string worker_;
};

TEST_F(SucceededJobsTest, TheOldestBeyondTheKeptAreDroppedOneEachSuccess) {
  worker_ = Register("host-a");
  for (uint32_t i = 1; i <= kDefaultSucceededJobsKept; ++i)
    RunToSuccess(Spec(1));
  // Registered, never dropped.
  for (const std::string& call : shards_.TakeCalls()) {
    EXPECT_THAT(call, ::testing::StartsWith("register")) << call;
  }
  RunToSuccess(Spec(1));
  std::vector<std::string> calls = shards_.TakeCalls();
  EXPECT_THAT(std::vector<std::string>(calls.end() - 2, calls.end()),
              ElementsAre("drop 0 job-000001", "drop 1 job-000001"));
  RunToSuccess(Spec(1));
  calls = shards_.TakeCalls();
  EXPECT_THAT(std::vector<std::string>(calls.end() - 2, calls.end()),
              ElementsAre("drop 0 job-000002", "drop 1 job-000002"));
}

TEST_F(SucceededJobsTest, FromJobTakesTheSourcesPlacementAndId) {
  worker_ = Register("host-a");
  JobSpec first = Spec(1);
  first.set_name("base");
  const std::string source = RunToSuccess(first);
  SubmitJobResponse response;
  // By name: the newest SUCCEEDED job called "base".
  ASSERT_TRUE(SubmitFromJob("base", Spec(1), &response).ok());
  EXPECT_EQ(response.spec().init().from_job(), source);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
      response.placement(), Job(source).placement()));
  EXPECT_EQ(Job(response.job_id()).spec().init().from_job(), source);
}

TEST_F(SucceededJobsTest, BadSourcesAreRefusedAtSubmitNamingTheTensor) {
  worker_ = Register("host-a");
  const std::string source = RunToSuccess(Spec(1));
  JobSpec running_spec = Spec(1);
  running_spec.set_name("running");
  const std::string running = Submit(running_spec);
  ASSERT_EQ(Job(running).state(), RUNNING);

  // The source's tensors "fc0/w" [784, 10] and "fc0/b" [10], but wider.
  JobSpec wider = Spec(1);
  wider.mutable_data()->clear_dataset();
  wider.mutable_data()->clear_epochs();
  for (const auto& [name, shape] :
       std::vector<std::pair<std::string, std::vector<uint64_t>>>{
           {"fc0/w", {784, 12}}, {"fc0/b", {10}}}) {
    TensorSpec* t = wider.mutable_model()->mutable_custom()->add_tensors();
    t->set_name(name);
    for (uint64_t d : shape) t->add_shape(d);
    t->mutable_init()->set_kind(ZEROS);
  }
  JobSpec chunked = Spec(1);
  chunked.set_partition_bytes(8192);
  JobSpec adam = Spec(1);
  adam.mutable_optimizer()->set_kind(ADAM);
  adam.mutable_init()->set_optimizer_state(true);
  struct Case {
    std::string source;
    JobSpec spec;
    std::vector<std::string> named;
  };
  const std::vector<Case> cases = {
      {"nothing", Spec(1), {"init.from_job: no job \"nothing\""}},
      {running, Spec(1), {"init.from_job: job ", running, "is RUNNING"}},
      {source,
       wider,
       {"init.from_job: tensor \"fc0/w\": shape [784, 12] in the job, "
        "[784, 10] in job ",
        source}},
      {source, chunked, {"init.from_job: partition_bytes is 8192", source}},
      {source, adam, {"init.from_job: optimizer_state: the optimizer is ADAM"}},
  };
  shards_.TakeCalls();
  for (const Case& c : cases) {
    SubmitJobResponse response;
    absl::Status st = SubmitFromJob(c.source, c.spec, &response);
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
    for (const std::string& n : c.named) {
      EXPECT_THAT(std::string(st.message()), HasSubstr(n));
      ASSERT_EQ(response.problems_size(), 1);
      EXPECT_THAT(response.problems(0), HasSubstr(n));
    }
  }
  ListJobsResponse list;
  ASSERT_TRUE(coord_->ListJobs(ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 2) << "a refused job was stored";
  EXPECT_THAT(shards_.TakeCalls(), IsEmpty());
}

// A source that was moved (psctl scale) lends the new job its shards with
// its placement; a spec asking for other shards is refused.
TEST_F(SucceededJobsTest, FromJobTakesTheSourcesShards) {
  worker_ = Register("host-a");
  JobSpec first = Spec(1);
  first.set_shards(1);
  const std::string source = RunToSuccess(first);
  SubmitJobResponse response;
  ASSERT_TRUE(SubmitFromJob(source, Spec(1), &response).ok());
  EXPECT_EQ(response.spec().shards(), 1u);
  EXPECT_EQ(Job(response.job_id()).spec().shards(), 1u);
  JobSpec other = Spec(1);
  other.set_shards(2);
  SubmitJobResponse refused;
  const absl::Status st = SubmitFromJob(source, other, &refused);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_THAT(std::string(st.message()),
              HasSubstr(absl::StrCat("shards: the job takes job ", source)));
}

// A replicated job from an unreplicated one: each chunk stays on its
// source's shard, its primary, with its backup on the next shard of the
// source's ring; a source on fewer shards than the copies is refused.
TEST_F(SucceededJobsTest, AReplicatedJobFromAJobGetsBackupsOnTheSourcesRing) {
  worker_ = Register("host-a");
  const std::string source = RunToSuccess(Spec(1));
  JobSpec narrow = Spec(1);
  narrow.set_shards(1);
  const std::string one = RunToSuccess(narrow);
  shards_.TakeCalls();
  JobSpec replicated = Spec(1);
  replicated.set_replication(2);
  SubmitJobResponse refused;
  absl::Status st = SubmitFromJob(one, replicated, &refused);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("replication: 2 copies need 2 shards; the job takes "
                        "its source's 1 (init.from_job)"));
  EXPECT_THAT(shards_.TakeCalls(), IsEmpty());

  SubmitJobResponse response;
  st = SubmitFromJob(source, replicated, &response);
  ASSERT_TRUE(st.ok()) << st;
  const Placement theirs = Job(source).placement();
  ASSERT_EQ(response.placement().chunks_size(), theirs.chunks_size());
  for (int i = 0; i < theirs.chunks_size(); ++i) {
    const ChunkPlacement& c = response.placement().chunks(i);
    EXPECT_EQ(c.shard(), theirs.chunks(i).shard()) << i;
    EXPECT_THAT(c.backups(), ElementsAre(1 - c.shard())) << i;
  }
  EXPECT_EQ(Job(response.job_id()).placement().chunks(0).backups_size(), 1);
}

// A replicated source: its placement's shard may hold a copy a failover
// left behind (and its backups would not fit this job's placement).
TEST_F(SucceededJobsTest, AReplicatedJobIsNoSource) {
  worker_ = Register("host-a");
  JobSpec replicated = Spec(1);
  replicated.set_replication(2);
  const std::string source = RunToSuccess(replicated);
  shards_.TakeCalls();
  SubmitJobResponse response;
  absl::Status st = SubmitFromJob(source, Spec(1), &response);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_THAT(std::string(st.message()),
              HasSubstr(absl::StrCat("init.from_job: job ", source,
                                     " \"softmax\" has replication 2: a "
                                     "failover may have left an older copy")));
  ASSERT_EQ(response.problems_size(), 1);
  EXPECT_THAT(shards_.TakeCalls(), IsEmpty());
}

TEST_F(SucceededJobsTest, ADroppedJobIsNoSource) {
  worker_ = Register("host-a");
  const std::string oldest = RunToSuccess(Spec(1));
  for (uint32_t i = 0; i < kDefaultSucceededJobsKept; ++i)
    RunToSuccess(Spec(1));
  SubmitJobResponse response;
  absl::Status st = SubmitFromJob(oldest, Spec(1), &response);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_THAT(std::string(st.message()),
              HasSubstr(absl::StrCat("job ", oldest,
                                     " \"softmax\" has left the shards")));
}

}  // namespace
}  // namespace ps
