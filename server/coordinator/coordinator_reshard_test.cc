// JobCoordinator: psctl scale --shards (ScaleJob's `shards`) re-placing a
// running job over the shards through their Reshard phases, the refusals
// that change nothing, and the refreshed assignment a worker then fetches.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/testing/coordinator_test_fixture.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// The coordinator of CoordinatorTest with a Reshard hook: every shard is
// quiesced at once; the calls are recorded as "PHASE shard".
class ReshardTest : public CoordinatorTest {
 protected:
  void SetUp() override {
    JobCoordinator::Options options;
    options.heartbeat_interval_ms = 500;
    options.worker_timeout_ms = 10000;
    options.shard_addresses = addresses_;
    options.clock = [this] { return clock_.Now(); };
    options.reshard = [this](uint32_t shard, const ReshardRequest& r,
                             absl::Time, ReshardResponse* out) {
      absl::MutexLock l(&mu_);
      calls_.push_back(
          absl::StrCat(ReshardRequest::Phase_Name(r.phase()), " ", shard));
      if (r.phase() == ReshardRequest::PREPARE) {
        // Held until the test lets go (bounded).
        mu_.AwaitWithTimeout(
            absl::Condition(
                +[](bool* hold) { return !*hold; }, &hold_prepare_),
            absl::Seconds(20));
      }
      out->set_max_version(40);
      out->set_quiesced(r.pause_step() > 0);
      return absl::OkStatus();
    };
    absl::StatusOr<std::unique_ptr<JobCoordinator>> coord =
        JobCoordinator::Create(options, &shards_);
    ASSERT_TRUE(coord.ok()) << coord.status();
    coord_ = *std::move(coord);
  }

  absl::Status Scale(const std::string& job, uint32_t shards,
                     uint32_t workers = 0, ScaleJobResponse* answer = nullptr) {
    ScaleJobRequest request;
    request.set_job_id(job);
    request.set_shards(shards);
    request.set_workers(workers);
    ScaleJobResponse response;
    const absl::Status st = coord_->ScaleJob(request, &response);
    if (answer != nullptr) *answer = response;
    return st;
  }
  absl::Status Drain(const std::string& job, std::vector<uint32_t> ids,
                     uint32_t shards = 0) {
    ScaleJobRequest request;
    request.set_job_id(job);
    for (uint32_t id : ids) request.add_drain(id);
    request.set_shards(shards);
    ScaleJobResponse response;
    return coord_->ScaleJob(request, &response);
  }
  // The job's re-placement once it is no longer in progress (bounded).
  ReshardStatus Finished(const std::string& job) {
    const absl::Time until = absl::Now() + absl::Seconds(20);
    for (;;) {
      ReshardStatus r = Job(job).reshard();
      if (r.phase() == "done" || r.phase().rfind("aborted", 0) == 0 ||
          absl::Now() > until) {
        return r;
      }
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
  std::vector<std::string> Calls() {
    absl::MutexLock l(&mu_);
    return calls_;
  }
  std::string RunningJob(JobSpec spec) {
    Register("host-a");
    const std::string job = Submit(spec);
    EXPECT_EQ(Job(job).state(), RUNNING);
    return job;
  }

  std::vector<std::string> addresses_ = {"10.0.0.1:7000", "10.0.0.2:7000"};
  absl::Mutex mu_;
  std::vector<std::string> calls_ ABSL_GUARDED_BY(mu_);
  bool hold_prepare_ ABSL_GUARDED_BY(mu_) = false;
};

// The same on 3 shards (psctl scale --drain).
class DrainTest : public ReshardTest {
 protected:
  DrainTest() { addresses_.push_back("10.0.0.3:7000"); }

  // The shards holding chunks of `job` now, ascending.
  std::vector<uint32_t> Holding(const std::string& job) {
    std::vector<uint32_t> held;
    const JobStatus status = Job(job);
    for (const ChunkPlacement& c : status.placement().chunks()) {
      if (std::find(held.begin(), held.end(), c.shard()) == held.end()) {
        held.push_back(c.shard());
      }
    }
    std::sort(held.begin(), held.end());
    return held;
  }
};

TEST_F(ReshardTest, GrowsOntoASecondShardAndWorkersGetTheNewPlacement) {
  JobSpec spec = Spec(1);
  spec.set_shards(1);
  const std::string job = RunningJob(spec);
  const std::string worker = "w-1";
  const JobStatus submitted = Job(job);
  for (const ChunkPlacement& c : submitted.placement().chunks()) {
    ASSERT_EQ(c.shard(), 0u);
  }
  ScaleJobResponse scaled;
  ASSERT_TRUE(Scale(job, 2, 0, &scaled).ok());
  const ReshardStatus done = Finished(job);
  EXPECT_EQ(done.phase(), "done");
  // The answer says at once what will move (psctl scale prints it).
  EXPECT_EQ(scaled.reshard().moved_chunks(), done.moved_chunks());
  EXPECT_EQ(scaled.reshard().moved_bytes(), done.moved_bytes());
  EXPECT_EQ(done.from_shards(), 1u);
  EXPECT_EQ(done.target_shards(), 2u);
  EXPECT_EQ(done.epoch(), 1u);
  EXPECT_EQ(done.pause_step(), 42u);  // the shards' highest version 40 + 2
  EXPECT_GT(done.moved_chunks(), 0u);
  const JobStatus status = Job(job);
  EXPECT_EQ(status.spec().shards(), 2u);
  EXPECT_EQ(status.placement().epoch(), 1u);
  int on_second = 0;
  for (const ChunkPlacement& c : status.placement().chunks()) {
    on_second += c.shard() == 1;
  }
  EXPECT_EQ(on_second, static_cast<int>(done.moved_chunks()));
  // Every phase reached both shards; nothing was aborted.
  const std::vector<std::string> calls = Calls();
  for (const char* phase : {"PREPARE 0", "PREPARE 1", "COMMIT 0", "COMMIT 1"}) {
    EXPECT_EQ(std::count(calls.begin(), calls.end(), phase), 1) << phase;
  }
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "ABORT 0"), 0);

  // A worker whose shard refused its epoch asks again, at once.
  GetAssignmentRequest refresh;
  refresh.set_worker_id(worker);
  refresh.set_job_id(job);
  GetAssignmentResponse answer;
  absl::Status answered = absl::UnknownError("no answer");
  coord_->GetAssignment(refresh, &answer,
                        [&](absl::Status s) { answered = s; });
  ASSERT_TRUE(answered.ok()) << answered;
  EXPECT_EQ(answer.assignment().placement().epoch(), 1u);
  refresh.set_job_id("job-000099");
  coord_->GetAssignment(refresh, &answer,
                        [&](absl::Status s) { answered = s; });
  EXPECT_EQ(answered.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(answered.message(), HasSubstr("job_id"));
}

TEST_F(ReshardTest, RefusalsNameTheFieldAndChangeNothing) {
  JobSpec replicated = Spec(1);
  replicated.set_replication(2);
  const std::string job = RunningJob(replicated);
  const JobStatus before = Job(job);
  EXPECT_THAT(Scale(job, 3).message(), HasSubstr("shards: 3 is outside"));
  EXPECT_THAT(Scale(job, 1, 2).message(),
              HasSubstr("either workers or shards"));
  // Two copies need two shards.
  absl::Status st = Scale(job, 1);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(),
              HasSubstr("replication: 2 copies need 2 shards, got 1"));
  EXPECT_EQ(Scale("job-000099", 1).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Job(job).SerializeAsString(), before.SerializeAsString());
  EXPECT_TRUE(Calls().empty());
}

TEST_F(ReshardTest, AReplicatedJobNotUnderBspIsRefused) {
  JobSpec asp = Spec(1);
  asp.set_replication(2);
  asp.mutable_consistency()->set_mode(ASP);
  const std::string job = RunningJob(asp);
  const JobStatus before = Job(job);
  const absl::Status st = Scale(job, 1);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("replication: job " + job +
                                      " has replicas and is not BSP"));
  EXPECT_EQ(Job(job).SerializeAsString(), before.SerializeAsString());
  EXPECT_TRUE(Calls().empty());
}

// A job with a sparse table: its rows go on its shards at submit and
// follow each move (Placement.table_shards); with replicas, or not BSP, it
// is refused naming the field.
TEST_F(ReshardTest, ATablesRowsFollowItsShards) {
  JobSpec spec = Spec(1);
  spec.set_shards(1);
  TableSpec* t = spec.add_tables();
  t->set_name("emb");
  t->set_dim(8);
  t->set_num_ids(1000);
  t->mutable_optimizer()->set_kind(ADAGRAD);
  t->mutable_optimizer()->set_learning_rate(0.1f);
  const std::string job = RunningJob(spec);
  EXPECT_THAT(Job(job).placement().table_shards(), ::testing::ElementsAre(0u));
  ASSERT_TRUE(Scale(job, 2).ok());
  EXPECT_EQ(Finished(job).phase(), "done");
  EXPECT_THAT(Job(job).placement().table_shards(),
              ::testing::ElementsAre(0u, 1u));

  for (bool replicated : {true, false}) {
    JobSpec other = spec;
    other.set_name(replicated ? "replicated" : "asp");
    other.set_shards(2);
    if (replicated) {
      other.set_replication(2);
    } else {
      other.mutable_consistency()->set_mode(ASP);
    }
    Register("host-" + other.name());
    const std::string id = Submit(other);
    ASSERT_EQ(Job(id).state(), RUNNING);
    const JobStatus before = Job(id);
    const absl::Status st = Scale(id, 1);
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(st.message(),
                HasSubstr(replicated ? "replication: job " + id +
                                           " has sparse tables and replicas"
                                     : "consistency.mode: job " + id +
                                           " has sparse tables and is not "
                                           "BSP"));
    EXPECT_EQ(Job(id).SerializeAsString(), before.SerializeAsString());
  }
}

TEST_F(ReshardTest, ThePlacementItHasAlreadyMovesNothing) {
  const std::string job = RunningJob(Spec(1));  // on both shards
  ASSERT_TRUE(Scale(job, 2).ok());
  const ReshardStatus r = Job(job).reshard();
  EXPECT_EQ(r.phase(), "done");
  EXPECT_EQ(r.moved_chunks(), 0u);
  EXPECT_EQ(Job(job).placement().epoch(), 0u);
  EXPECT_TRUE(Calls().empty());
}

TEST_F(DrainTest, DrainingTheMiddleShardLeavesTheJobOnTheOthers) {
  const std::string job = RunningJob(Spec(1));  // on all 3 shards
  ASSERT_EQ(Holding(job), (std::vector<uint32_t>{0, 1, 2}));
  const Placement before = Job(job).placement();
  ASSERT_TRUE(Drain(job, {1}).ok());
  const ReshardStatus done = Finished(job);
  EXPECT_EQ(done.phase(), "done");
  EXPECT_EQ(done.from_shards(), 3u);
  EXPECT_EQ(done.target_shards(), 2u);
  EXPECT_THAT(done.from_shard_ids(), ::testing::ElementsAre(0, 1, 2));
  EXPECT_THAT(done.target_shard_ids(), ::testing::ElementsAre(0, 2));
  const JobStatus status = Job(job);
  EXPECT_EQ(status.spec().shards(), 2u);
  EXPECT_THAT(status.spec().shard_ids(), ::testing::ElementsAre(0, 2));
  EXPECT_EQ(status.placement().epoch(), 1u);
  EXPECT_EQ(Holding(job), (std::vector<uint32_t>{0, 2}));
  uint32_t moved = 0;
  for (int i = 0; i < before.chunks_size(); ++i) {
    moved += before.chunks(i).shard() != status.placement().chunks(i).shard();
  }
  EXPECT_EQ(moved, done.moved_chunks());

  // --shards on an explicit set grows by the lowest shard it lacks: back
  // onto shard 1, and the spec is the first 3 shards again.
  ASSERT_TRUE(Scale(job, 3).ok());
  EXPECT_EQ(Finished(job).phase(), "done");
  EXPECT_EQ(Job(job).spec().shards(), 3u);
  EXPECT_EQ(Job(job).spec().shard_ids_size(), 0);
  EXPECT_EQ(Holding(job), (std::vector<uint32_t>{0, 1, 2}));
  // Draining the highest shard is plain shrinking: no explicit set.
  ASSERT_TRUE(Drain(job, {2}).ok());
  const ReshardStatus shrunk = Finished(job);
  EXPECT_EQ(shrunk.phase(), "done");
  EXPECT_EQ(shrunk.target_shard_ids_size(), 0);
  EXPECT_EQ(Job(job).spec().shards(), 2u);
  EXPECT_EQ(Job(job).spec().shard_ids_size(), 0);
}

// k = 2 from shards 0 and 1 onto all three: the ring over them (each
// chunk's backup on the next shard), and back; then onto all three again
// and shard 1 drained: the ring over [0, 2].
TEST_F(DrainTest, AReplicatedJobMovesOnTheRingOfItsShards) {
  JobSpec spec = Spec(1);
  spec.set_replication(2);
  spec.set_shards(2);
  const std::string job = RunningJob(spec);
  for (uint32_t n : {3u, 2u}) {
    ASSERT_TRUE(Scale(job, n).ok()) << n;
    EXPECT_EQ(Finished(job).phase(), "done") << n;
    const JobStatus status = Job(job);
    EXPECT_EQ(status.spec().shards(), n);
    EXPECT_EQ(status.spec().shard_ids_size(), 0);
    EXPECT_EQ(Holding(job).size(), n);
    for (const ChunkPlacement& c : status.placement().chunks()) {
      ASSERT_EQ(c.backups_size(), 1);
      EXPECT_EQ(c.backups(0), (c.shard() + 1) % n) << c.chunk_id();
    }
  }
  ASSERT_TRUE(Scale(job, 3).ok());
  EXPECT_EQ(Finished(job).phase(), "done");
  ASSERT_TRUE(Drain(job, {1}).ok());
  EXPECT_EQ(Finished(job).phase(), "done");
  const JobStatus drained = Job(job);
  EXPECT_THAT(drained.spec().shard_ids(), ::testing::ElementsAre(0, 2));
  EXPECT_EQ(Holding(job), (std::vector<uint32_t>{0, 2}));
  for (const ChunkPlacement& c : drained.placement().chunks()) {
    ASSERT_EQ(c.backups_size(), 1);
    EXPECT_EQ(c.backups(0), c.shard() == 0 ? 2u : 0u) << c.chunk_id();
  }
}

TEST_F(DrainTest, ShardsShrinksAnExplicitSetByItsHighestShard) {
  JobSpec spec = Spec(1);
  spec.add_shard_ids(1);
  spec.add_shard_ids(2);
  const std::string job = RunningJob(spec);
  EXPECT_EQ(Holding(job), (std::vector<uint32_t>{1, 2}));
  ASSERT_TRUE(Scale(job, 1).ok());
  const ReshardStatus done = Finished(job);
  EXPECT_EQ(done.phase(), "done");
  EXPECT_THAT(done.target_shard_ids(), ::testing::ElementsAre(1));
  EXPECT_THAT(Job(job).spec().shard_ids(), ::testing::ElementsAre(1));
  EXPECT_EQ(Holding(job), (std::vector<uint32_t>{1}));
}

TEST_F(DrainTest, RefusalsNameTheFieldAndChangeNothing) {
  JobSpec spec = Spec(1);
  spec.set_shards(2);  // on shards 0 and 1
  const std::string job = RunningJob(spec);
  const JobStatus before = Job(job);
  struct Case {
    std::vector<uint32_t> drain;
    uint32_t shards;
    absl::StatusCode code;
    std::string want;
  };
  const std::vector<Case> cases = {
      {{3},
       0,
       absl::StatusCode::kInvalidArgument,
       "drain: shard 3 is past the cluster's 3 shards"},
      {{1, 1},
       0,
       absl::StatusCode::kInvalidArgument,
       "drain: shard 1 named twice"},
      {{2},
       0,
       absl::StatusCode::kFailedPrecondition,
       "drain: job " + job + " does not use shard 2 (its shards: [0, 1])"},
      {{0, 1},
       0,
       absl::StatusCode::kFailedPrecondition,
       "drain: [0, 1] is every shard job " + job + " uses"},
      {{1},
       2,
       absl::StatusCode::kInvalidArgument,
       "drain: set either workers or shards or drain"},
  };
  for (const Case& c : cases) {
    absl::Status st = Drain(job, c.drain, c.shards);
    EXPECT_EQ(st.code(), c.code) << st;
    EXPECT_THAT(st.message(), HasSubstr(c.want));
  }
  EXPECT_EQ(Drain("job-000099", {1}).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Job(job).SerializeAsString(), before.SerializeAsString());
  EXPECT_TRUE(Calls().empty());
}

TEST_F(DrainTest, RefusedWhileAMoveIsInProgressAndOnceTheJobEnded) {
  const std::string job = RunningJob(Spec(1));
  {
    absl::MutexLock l(&mu_);
    hold_prepare_ = true;
  }
  ASSERT_TRUE(Drain(job, {2}).ok());
  absl::Status st = Drain(job, {1});
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(st.message(),
              HasSubstr("drain: job " + job + " is still moving to 2 shards"));
  {
    absl::MutexLock l(&mu_);
    hold_prepare_ = false;
  }
  EXPECT_EQ(Finished(job).phase(), "done");

  CancelJobRequest cancel;
  cancel.set_job_id(job);
  CancelJobResponse cancelled;
  ASSERT_TRUE(coord_->CancelJob(cancel, &cancelled).ok());
  const JobStatus ended = Job(job);
  st = Drain(job, {1});
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(st.message(), HasSubstr("only a running job scales"));
  EXPECT_EQ(Job(job).SerializeAsString(), ended.SerializeAsString());
}

}  // namespace
}  // namespace ps
