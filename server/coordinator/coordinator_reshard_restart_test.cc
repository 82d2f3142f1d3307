// JobCoordinator over a JobStore: a coordinator that restarts in the middle
// of a re-placement (psctl scale --shards or --drain) finishes the move when
// its store holds the new placement ("committing": COMMIT on every shard
// again), and aborts it on every shard when it does not (the old placement goes
// on). The restart is the store's files copied while the first coordinator is
// held inside a shard call, and a second coordinator created over the copy,
// as a psd restarted after kill -9 would be.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/job_store.h"
#include "server/coordinator/testing/coordinator_test_fixture.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

class ReshardRestartTest : public CoordinatorTest {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(
        std::getenv("TEST_TMPDIR"), "/",
        ::testing::UnitTest::GetInstance()->current_test_info()->name(), "-",
        getpid());
    fs::create_directories(dir_ + "/first");
    fs::create_directories(dir_ + "/second");
  }
  void TearDown() override {
    second_.reset();
    second_store_.reset();
    release_.Notify();  // the first coordinator's held call, if any
    clock_.Advance(absl::Seconds(120));  // past its COMMIT retries
    coord_.reset();
    first_store_.reset();
  }

  // A coordinator over DIR/NAME/jobs.sqlite whose Reshard calls are
  // recorded; the call of phase `hold` waits for release_ and then fails.
  std::unique_ptr<JobCoordinator> Start(const std::string& name,
                                        ReshardRequest::Phase hold,
                                        std::unique_ptr<JobStore>* store) {
    JobStore::Options store_options;
    store_options.path = dir_ + "/" + name + "/jobs.sqlite";
    absl::StatusOr<std::unique_ptr<JobStore>> opened =
        JobStore::Open(store_options);
    EXPECT_TRUE(opened.ok()) << opened.status();
    *store = *std::move(opened);
    JobCoordinator::Options options;
    options.heartbeat_interval_ms = 500;
    options.worker_timeout_ms = 10000;
    options.shard_addresses = {"10.0.0.1:7000", "10.0.0.2:7000"};
    options.clock = [this] { return clock_.Now(); };
    options.store = store->get();
    options.reshard = [this, name, hold](uint32_t shard,
                                         const ReshardRequest& r, absl::Time,
                                         ReshardResponse* out) {
      {
        absl::MutexLock l(&mu_);
        calls_.push_back(absl::StrCat(
            name, " ", ReshardRequest::Phase_Name(r.phase()), " ", shard));
      }
      out->set_max_version(40);
      out->set_quiesced(r.pause_step() > 0);
      if (name == "second" && r.phase() == ReshardRequest::COMMIT &&
          shard == 1) {
        absl::MutexLock l(&mu_);
        if (dead_commits_ > 0) {  // shard 1 is still restarting
          --dead_commits_;
          return absl::UnavailableError("connection refused");
        }
      }
      if (r.phase() != hold) return absl::OkStatus();
      {
        absl::MutexLock l(&mu_);  // both shards' calls are held
        if (!held_.HasBeenNotified()) held_.Notify();
      }
      release_.WaitForNotification();
      return absl::UnavailableError("the first coordinator is gone");
    };
    absl::StatusOr<std::unique_ptr<JobCoordinator>> coord =
        JobCoordinator::Create(options, &shards_);
    EXPECT_TRUE(coord.ok()) << coord.status();
    return coord.ok() ? *std::move(coord) : nullptr;
  }

  // Runs a job on shard 0 of 2 under the first coordinator, scales it to 2
  // shards (or, with `drain`, runs it on both and drains shard 0) and, once
  // the first coordinator is held in `hold`, starts the second over a copy
  // of the store; the job's status there.
  JobStatus RestartDuring(ReshardRequest::Phase hold, bool drain = false) {
    coord_ = Start("first", hold, &first_store_);
    Register("host-a");
    JobSpec spec = Spec(1);
    spec.set_shards(drain ? 0 : 1);
    job_ = Submit(spec);
    ScaleJobRequest scale;
    scale.set_job_id(job_);
    if (drain) {
      scale.add_drain(0);
    } else {
      scale.set_shards(2);
    }
    ScaleJobResponse response;
    EXPECT_TRUE(coord_->ScaleJob(scale, &response).ok());
    held_.WaitForNotification();
    for (const char* suffix : {"", "-wal", "-shm"}) {
      const fs::path from = dir_ + "/first/jobs.sqlite" + suffix;
      if (fs::exists(from)) {
        fs::copy_file(from, dir_ + "/second/jobs.sqlite" + suffix,
                      fs::copy_options::overwrite_existing);
      }
    }
    second_ =
        Start("second", ReshardRequest::PHASE_UNSPECIFIED, &second_store_);
    GetJobRequest get;
    get.set_job_id(job_);
    JobStatus status;
    EXPECT_TRUE(second_->GetJob(get, &status).ok());
    return status;
  }
  int Count(const std::string& call) {
    absl::MutexLock l(&mu_);
    return std::count(calls_.begin(), calls_.end(), call);
  }

  std::string dir_;
  std::string job_;
  std::unique_ptr<JobStore> first_store_, second_store_;
  std::unique_ptr<JobCoordinator> second_;
  absl::Notification held_, release_;
  absl::Mutex mu_;
  std::vector<std::string> calls_ ABSL_GUARDED_BY(mu_);
  // The second coordinator's COMMITs to shard 1 that fail first.
  int dead_commits_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST_F(ReshardRestartTest, ARestartAfterTheCommitFinishesTheMove) {
  const JobStatus status = RestartDuring(ReshardRequest::COMMIT);
  EXPECT_EQ(status.state(), RUNNING);
  EXPECT_EQ(status.reshard().phase(), "done");
  EXPECT_EQ(status.placement().epoch(), 1u);
  EXPECT_EQ(status.spec().shards(), 2u);
  EXPECT_EQ(Count("second COMMIT 0"), 1);
  EXPECT_EQ(Count("second COMMIT 1"), 1);
  EXPECT_EQ(Count("second ABORT 0"), 0);
}

// Shard 1 restarts too (psd0 and psd1 killed together): the restarted
// coordinator's COMMIT reaches it on the third try, and the move is done,
// naming it late.
TEST_F(ReshardRestartTest, ARestartAfterTheCommitWaitsForAShardComingBack) {
  {
    absl::MutexLock l(&mu_);
    dead_commits_ = 2;
  }
  const JobStatus status = RestartDuring(ReshardRequest::COMMIT);
  EXPECT_EQ(status.state(), RUNNING);
  EXPECT_EQ(status.reshard().phase(), "done");
  EXPECT_THAT(status.reshard().late_shards(), ::testing::ElementsAre(1u));
  EXPECT_EQ(status.placement().epoch(), 1u);
  EXPECT_EQ(Count("second COMMIT 0"), 1);
  EXPECT_EQ(Count("second COMMIT 1"), 3);
  EXPECT_EQ(Count("second ABORT 1"), 0);
}

TEST_F(ReshardRestartTest, ARestartBeforeTheCommitAbortsTheMove) {
  const JobStatus status = RestartDuring(ReshardRequest::PREPARE);
  EXPECT_EQ(status.state(), RUNNING);
  EXPECT_EQ(status.reshard().phase().rfind("aborted: the coordinator "
                                           "restarted in the middle",
                                           0),
            0u)
      << status.reshard().phase();
  EXPECT_EQ(status.placement().epoch(), 0u);
  EXPECT_EQ(status.spec().shards(), 1u);
  EXPECT_EQ(Count("second ABORT 0"), 1);
  EXPECT_EQ(Count("second ABORT 1"), 1);
  EXPECT_EQ(Count("second COMMIT 0"), 0);
}

TEST_F(ReshardRestartTest, ADrainCommittedBeforeARestartKeepsItsShardSet) {
  const JobStatus status = RestartDuring(ReshardRequest::COMMIT, true);
  EXPECT_EQ(status.state(), RUNNING);
  EXPECT_EQ(status.reshard().phase(), "done");
  ASSERT_EQ(status.spec().shard_ids_size(), 1);
  EXPECT_EQ(status.spec().shard_ids(0), 1u);
  EXPECT_EQ(status.spec().shards(), 1u);
  for (const ChunkPlacement& c : status.placement().chunks()) {
    EXPECT_EQ(c.shard(), 1u);
  }
  EXPECT_EQ(Count("second COMMIT 0"), 1);
  EXPECT_EQ(Count("second COMMIT 1"), 1);
}

}  // namespace
}  // namespace ps
