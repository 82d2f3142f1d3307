// JobCoordinator: custom models' jobs (ModelSpec.custom), created or joined
// by name (SubmitJobRequest.join_existing) and run only by the workers that
// joined them (RegisterWorkerRequest.job_id).
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/testing/coordinator_test_fixture.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

JobSpec CustomSpec(uint32_t num_workers) {
  JobSpec spec;
  spec.set_name("torch-mlp");
  spec.set_num_workers(num_workers);
  spec.mutable_data()->set_batch_size(32);
  spec.mutable_optimizer()->set_kind(SGD);
  spec.mutable_optimizer()->set_learning_rate(0.1f);
  spec.mutable_consistency()->set_mode(BSP);
  CustomModel* m = spec.mutable_model()->mutable_custom();
  TensorSpec* w = m->add_tensors();
  w->set_name("fc.weight");
  w->add_shape(10);
  w->add_shape(784);
  w->mutable_init()->set_kind(UNIFORM);
  w->mutable_init()->set_scale(0.0357f);
  TensorSpec* b = m->add_tensors();
  b->set_name("fc.bias");
  b->add_shape(10);
  b->mutable_init()->set_kind(ZEROS);
  return spec;
}

class CoordinatorJoinTest : public CoordinatorTest {
 protected:
  absl::Status SubmitOrJoin(const JobSpec& spec, SubmitJobResponse* response) {
    SubmitJobRequest request;
    *request.mutable_spec() = spec;
    request.set_join_existing(true);
    return coord_->SubmitJob(request, response);
  }
  absl::StatusOr<std::string> Join(const std::string& name,
                                   const std::string& job_id) {
    RegisterWorkerRequest request;
    request.set_name(name);
    request.set_job_id(job_id);
    RegisterWorkerResponse response;
    absl::Status s = coord_->RegisterWorker(request, &response);
    if (!s.ok()) return s;
    return response.worker_id();
  }
};

TEST_F(CoordinatorJoinTest, JoinExistingCreatesOnceThenFindsTheJobByName) {
  SubmitJobResponse first, second;
  ASSERT_TRUE(SubmitOrJoin(CustomSpec(2), &first).ok());
  EXPECT_FALSE(first.joined());
  ASSERT_TRUE(SubmitOrJoin(CustomSpec(2), &second).ok());
  EXPECT_TRUE(second.joined());
  EXPECT_EQ(second.job_id(), first.job_id());
  EXPECT_EQ(second.placement().SerializeAsString(),
            first.placement().SerializeAsString());
  ListJobsResponse list;
  ASSERT_TRUE(coord_->ListJobs({}, &list).ok());
  EXPECT_EQ(list.jobs_size(), 1);
}

TEST_F(CoordinatorJoinTest, JoinExistingRefusesAnotherSpecNamingTheField) {
  SubmitJobResponse first, other;
  ASSERT_TRUE(SubmitOrJoin(CustomSpec(2), &first).ok());
  JobSpec changed = CustomSpec(2);
  changed.mutable_model()->mutable_custom()->mutable_tensors(1)->set_shape(0,
                                                                           12);
  const absl::Status s = SubmitOrJoin(changed, &other);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("name: job job-000001 \"torch-mlp\" is "
                                     "PENDING with another spec"));
  EXPECT_THAT(s.message(), HasSubstr("tensors[1].shape[0]: 10 -> 12"));
  EXPECT_EQ(other.job_id(), "");
  ListJobsResponse list;
  ASSERT_TRUE(coord_->ListJobs({}, &list).ok());
  EXPECT_EQ(list.jobs_size(), 1);  // nothing stored
  // Once that job ended, the name makes a new job.
  CancelJobRequest cancel;
  cancel.set_job_id(first.job_id());
  CancelJobResponse cancelled;
  ASSERT_TRUE(coord_->CancelJob(cancel, &cancelled).ok());
  ASSERT_TRUE(SubmitOrJoin(changed, &other).ok());
  EXPECT_FALSE(other.joined());
  EXPECT_EQ(other.job_id(), "job-000002");
}

TEST_F(CoordinatorJoinTest, OnlyJoinedWorkersRunACustomJob) {
  SubmitJobResponse submitted;
  ASSERT_TRUE(SubmitOrJoin(CustomSpec(2), &submitted).ok());
  const std::string job = submitted.job_id();
  // workerd's workers (no job_id) stay idle; a built-in job takes them.
  const std::string idle = Register("workerd-a");
  absl::StatusOr<std::string> a = Join("py-a", job);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(Job(job).state(), PENDING);
  EXPECT_EQ(Job(job).reason(),
            "waiting for workers to join: needs 2, 1 joined");
  absl::StatusOr<std::string> b = Join("py-b", job);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(Job(job).state(), RUNNING);
  std::optional<Assignment> got = Assigned(*b);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->job_id(), job);
  EXPECT_EQ(got->rank(), 1u);
  EXPECT_EQ(got->spec().tensors_size(), 2);
  EXPECT_FALSE(Assigned(idle).has_value());
  // A built-in job goes to the idle workerd, never to a joined worker.
  const std::string builtin = Submit(Spec(1));
  EXPECT_EQ(Job(builtin).state(), RUNNING);
  EXPECT_EQ(Job(builtin).workers(0), "workerd-a");
}

TEST_F(CoordinatorJoinTest, JoinIsRefusedWithoutChangingAnything) {
  SubmitJobResponse submitted;
  ASSERT_TRUE(SubmitOrJoin(CustomSpec(1), &submitted).ok());
  const std::string builtin_worker = Register("workerd-a");
  const std::string builtin = Submit(Spec(2));  // pending, 1 idle
  struct Case {
    std::string job_id;
    absl::StatusCode code;
    std::string message;
  };
  const Case cases[] = {
      {"job-000099", absl::StatusCode::kNotFound,
       "job_id: unknown job \"job-000099\""},
      {builtin, absl::StatusCode::kFailedPrecondition,
       "job_id: job job-000002 trains a built-in model"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::string> w = Join("py-a", c.job_id);
    EXPECT_EQ(w.status().code(), c.code) << c.job_id;
    EXPECT_THAT(w.status().message(), HasSubstr(c.message));
  }
  // The refused joins registered nothing: the built-in job still waits for
  // one more idle worker, and the custom one for its joiner.
  EXPECT_EQ(Job(builtin).reason(), "waiting for workers: needs 2, 1 idle");
  ASSERT_TRUE(Join("py-a", submitted.job_id()).ok());
  EXPECT_EQ(Job(submitted.job_id()).state(), RUNNING);
  absl::StatusOr<std::string> extra = Join("py-b", submitted.job_id());
  EXPECT_EQ(extra.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(extra.status().message(),
              HasSubstr("already has its 1 workers (RUNNING)"));
  CancelJobRequest cancel;
  cancel.set_job_id(submitted.job_id());
  CancelJobResponse cancelled;
  ASSERT_TRUE(coord_->CancelJob(cancel, &cancelled).ok());
  absl::StatusOr<std::string> late = Join("py-c", submitted.job_id());
  EXPECT_THAT(late.status().message(),
              HasSubstr("already ended CANCELLED: cancelled by user"));
  EXPECT_EQ(Job(builtin).state(), PENDING);
  (void)builtin_worker;
}

}  // namespace
}  // namespace ps
