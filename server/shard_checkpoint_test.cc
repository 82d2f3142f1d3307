// Shard tests. Checkpoints and restarts.
#include <cstdint>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/checkpoint.h"
#include "server/optimizer.h"
#include "server/shard.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace shard_test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A crash between steps with every_steps 1: the restored shard answers a
// stale retry with the parameters it has and continues bitwise like an
// uninterrupted run.
TEST(ShardCheckpointTest, BspRestoreContinuesBitwise) {
  for (OptimizerKind kind : {SGD, ADAM}) {
    SCOPED_TRACE(OptimizerKind_Name(kind));
    const RegisterJobRequest reg =
        Registration("j", CheckpointSpec(BSP, 1, kind));
    const std::string dir = CheckpointDir("bsp_restore");
    std::string image;
    uint64_t at_five;
    {
      Shard::RestoreReport report;
      std::unique_ptr<Shard> a = CheckpointingShard(dir, &report);
      EXPECT_TRUE(report.restored.empty());
      RegisterJobResponse resp;
      ASSERT_TRUE(a->RegisterJob(reg, &resp).ok());
      for (uint32_t t = 0; t < 5; ++t) BspStep(*a, reg, t, {t % 2, 1 - t % 2});
      at_five = Checksum(*a, "j");
      image = CrashImage(dir, "bsp_restore_image");
      // Pushed after the crash image: lost with the process.
      auto lost = StartPushPull(*a, reg, 0, 5, 5);
      a->Shutdown();
    }
    Shard::RestoreReport report;
    std::unique_ptr<Shard> b = CheckpointingShard(image, &report);
    ASSERT_EQ(report.restored.size(), 1u);
    EXPECT_THAT(report.restored[0], HasSubstr("job \"j\" at step 5 from "));
    EXPECT_TRUE(report.problems.empty());
    EXPECT_EQ(Checksum(*b, "j"), at_five);
    JobStats stats = StatsOf(*b, "j");
    EXPECT_EQ(stats.restored_from_step(), 5u);
    EXPECT_EQ(stats.version(), 5u);
    EXPECT_EQ(stats.checkpoints(), 0u);

    // Worker 1's retry of step 4 is stale: answered at once, version 5.
    auto stale = StartPushPull(*b, reg, 1, 4, 4);
    ASSERT_TRUE(stale->done.HasBeenNotified());
    ASSERT_TRUE(stale->status.ok()) << stale->status;
    EXPECT_EQ(stale->resp.stale(), 4u);
    EXPECT_EQ(stale->resp.parameters(0).version(), 5u);
    // Worker 0 retries step 5, worker 1 pushes it: applied once.
    for (uint64_t t = 5; t < 10; ++t) BspStep(*b, reg, t);
    EXPECT_EQ(Checksum(*b, "j"), ReferenceChecksum(reg, 10));
    EXPECT_EQ(StatsOf(*b, "j").checkpoints(), 5u);
  }
}

// With every_steps 1 an answer carrying version v leaves only once a
// checkpoint of version v is on disk: one checkpoint per step.
TEST(ShardCheckpointTest, AnswersWaitForTheirCheckpoint) {
  const RegisterJobRequest reg = Registration("j", CheckpointSpec(BSP, 1));
  const std::string dir = CheckpointDir("answers_wait");
  Shard::RestoreReport report;
  std::unique_ptr<Shard> shard = CheckpointingShard(dir, &report);
  RegisterJobResponse resp;
  ASSERT_TRUE(shard->RegisterJob(reg, &resp).ok());
  absl::StatusOr<std::unique_ptr<CheckpointStore>> store =
      CheckpointStore::Open(dir, 0);
  ASSERT_TRUE(store.ok());
  absl::StatusOr<CheckpointStore::Loaded> first = (*store)->LoadLatest("j");
  ASSERT_TRUE(first.ok()) << "registration did not write a checkpoint";
  EXPECT_EQ(first->checkpoint.step, 0u);
  for (uint64_t t = 0; t < 6; ++t) {
    BspStep(*shard, reg, t);
    absl::StatusOr<CheckpointStore::Loaded> latest = (*store)->LoadLatest("j");
    ASSERT_TRUE(latest.ok()) << latest.status();
    EXPECT_GE(latest->checkpoint.step, t + 1) << "answered before durable";
    for (const ChunkState& c : latest->checkpoint.chunks) {
      EXPECT_EQ(c.version, t + 1);
    }
  }
  EXPECT_EQ(StatsOf(*shard, "j").checkpoints(), 7u);  // registration + 6
  // A pull of a version not yet reached waits for the checkpoint too.
  auto pull = StartPull(*shard, "j", 6, 6);
  EXPECT_TRUE(pull->done.HasBeenNotified());
}

// A checkpoint taken in the middle of a step holds the pushes already
// buffered: the retry is a duplicate, the step completes once.
TEST(ShardCheckpointTest, PendingPushesSurviveARestore) {
  const RegisterJobRequest reg = Registration("j", CheckpointSpec(BSP, 1));
  const std::string dir = CheckpointDir("pending");
  std::string image;
  {
    Shard::RestoreReport report;
    std::unique_ptr<Shard> a = CheckpointingShard(dir, &report);
    RegisterJobResponse resp;
    ASSERT_TRUE(a->RegisterJob(reg, &resp).ok());
    for (uint64_t t = 0; t < 3; ++t) BspStep(*a, reg, t);
    auto waiting = StartPushPull(*a, reg, 0, 3, 3);
    ASSERT_TRUE(a->CheckpointNow("j").ok());
    image = CrashImage(dir, "pending_image");
    a->Shutdown();
    EXPECT_EQ(waiting->status.code(), absl::StatusCode::kUnavailable);
  }
  Shard::RestoreReport report;
  std::unique_ptr<Shard> b = CheckpointingShard(image, &report);
  ASSERT_EQ(report.restored.size(), 1u);
  EXPECT_THAT(StatsOf(*b, "j").missing_workers(), ElementsAre(1));
  auto retry = StartPushPull(*b, reg, 0, 3, 3);
  EXPECT_FALSE(retry->done.HasBeenNotified());
  auto other = StartPushPull(*b, reg, 1, 3, 3);
  for (auto* c : {retry.get(), other.get()}) {
    ASSERT_TRUE(c->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    ASSERT_TRUE(c->status.ok()) << c->status;
  }
  EXPECT_EQ(retry->resp.duplicates(), 4u);
  for (uint64_t t = 4; t < 6; ++t) BspStep(*b, reg, t);
  EXPECT_EQ(Checksum(*b, "j"), ReferenceChecksum(reg, 6));
}

// A graceful stop writes what changed since the last checkpoint, including
// a half-pushed step, so a restart loses nothing even without every_steps 1.
TEST(ShardCheckpointTest, ShutdownWritesALastCheckpoint) {
  const RegisterJobRequest reg = Registration("j", CheckpointSpec(BSP, 1000));
  const std::string dir = CheckpointDir("shutdown_last");
  {
    Shard::RestoreReport report;
    std::unique_ptr<Shard> a = CheckpointingShard(dir, &report);
    RegisterJobResponse resp;
    ASSERT_TRUE(a->RegisterJob(reg, &resp).ok());
    for (uint64_t t = 0; t < 3; ++t) BspStep(*a, reg, t);
    auto waiting = StartPushPull(*a, reg, 1, 3, 3);
    a->Shutdown();
    EXPECT_EQ(StatsOf(*a, "j").checkpoints(), 2u);  // registration, stop
  }
  Shard::RestoreReport report;
  std::unique_ptr<Shard> b = CheckpointingShard(dir, &report);
  ASSERT_EQ(report.restored.size(), 1u);
  EXPECT_EQ(StatsOf(*b, "j").restored_from_step(), 3u);
  BspStep(*b, reg, 3);
  EXPECT_EQ(Checksum(*b, "j"), ReferenceChecksum(reg, 4));
}

// Workers past the restored version: the shard lost their steps and says
// so instead of mixing versions.
TEST(ShardCheckpointTest, RestoredShardRefusesStepsItLost) {
  const RegisterJobRequest reg = Registration("j", CheckpointSpec(BSP, 1000));
  const std::string dir = CheckpointDir("lost_steps");
  std::string image;
  {
    Shard::RestoreReport report;
    std::unique_ptr<Shard> a = CheckpointingShard(dir, &report);
    RegisterJobResponse resp;
    ASSERT_TRUE(a->RegisterJob(reg, &resp).ok());
    for (uint64_t t = 0; t < 2; ++t) BspStep(*a, reg, t);
    ASSERT_TRUE(a->CheckpointNow("j").ok());
    for (uint64_t t = 2; t < 4; ++t) BspStep(*a, reg, t);
    image = CrashImage(dir, "lost_steps_image");
  }
  Shard::RestoreReport report;
  std::unique_ptr<Shard> b = CheckpointingShard(image, &report);
  ASSERT_EQ(report.restored.size(), 1u);
  const uint64_t before = Checksum(*b, "j");
  auto push = StartPushPull(*b, reg, 0, 4, 4);
  ASSERT_TRUE(push->done.HasBeenNotified());
  EXPECT_EQ(push->status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(push->status.message()),
              HasSubstr("shard 0 restarted and restored job \"j\" from its "
                        "checkpoint of step 2; the updates after it are lost"));
  EXPECT_THAT(std::string(push->status.message()), HasSubstr("every_steps: 1"));
  auto pull = StartPull(*b, "j", 4, 4);
  ASSERT_TRUE(pull->done.HasBeenNotified());
  EXPECT_EQ(pull->status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(pull->status.message()), HasSubstr("min_version: 4"));
  auto ok_pull = StartPull(*b, "j", 2, 2);
  EXPECT_TRUE(ok_pull->done.HasBeenNotified() && ok_pull->status.ok());
  EXPECT_EQ(Checksum(*b, "j"), before);
  EXPECT_EQ(Rejected(StatsOf(*b, "j"), "ahead_of_restore"), 2u);
}

// ASP: each worker's applied steps survive, so retries stay duplicates and
// the run continues as the same pushes would without the restart.
TEST(ShardCheckpointTest, AspRestoreKeepsDuplicateDetection) {
  const RegisterJobRequest reg = Registration("j", CheckpointSpec(ASP, 1000));
  auto push = [&](Shard& shard, uint32_t w, uint64_t step, uint64_t version) {
    PushResponse r;
    EXPECT_TRUE(shard
                    .Push(PushRequestFor<PushRequest>(reg, w, step, AllChunks(),
                                                      version),
                          &r)
                    .ok());
    return r;
  };
  Shard ref(ShardOptions{});
  RegisterJobResponse resp;
  ASSERT_TRUE(ref.RegisterJob(reg, &resp).ok());
  push(ref, 0, 0, 0);
  push(ref, 0, 1, 1);
  push(ref, 1, 0, 0);
  push(ref, 1, 1, 3);
  push(ref, 0, 2, 4);

  const std::string dir = CheckpointDir("asp_restore");
  std::string image;
  {
    Shard::RestoreReport report;
    std::unique_ptr<Shard> a = CheckpointingShard(dir, &report);
    ASSERT_TRUE(a->RegisterJob(reg, &resp).ok());
    push(*a, 0, 0, 0);
    push(*a, 0, 1, 1);
    push(*a, 1, 0, 0);
    ASSERT_TRUE(a->CheckpointNow("j").ok());
    push(*a, 1, 1, 3);  // lost with the crash
    image = CrashImage(dir, "asp_restore_image");
  }
  Shard::RestoreReport report;
  std::unique_ptr<Shard> b = CheckpointingShard(image, &report);
  ASSERT_EQ(report.restored.size(), 1u);
  const JobStats restored = StatsOf(*b, "j");
  EXPECT_EQ(restored.restored_from_step(), 1u);  // slowest worker: 1 step
  EXPECT_EQ(restored.step(), 1u);
  EXPECT_EQ(push(*b, 0, 1, 1).duplicates(), 4u);  // a retry, applied before
  EXPECT_EQ(push(*b, 1, 1, 4).duplicates(), 0u);  // version 4 was lost: ok
  push(*b, 0, 2, 4);
  EXPECT_EQ(Checksum(*b, "j"), Checksum(ref, "j"));
}

// Step and time triggers; nothing is written when nothing changed.
TEST(ShardCheckpointTest, StepAndTimeTriggers) {
  JobSpec spec = CheckpointSpec(ASP, 2);
  spec.mutable_checkpoint()->set_every_seconds(3600);
  const RegisterJobRequest reg = Registration("j", spec);
  const std::string dir = CheckpointDir("triggers");
  Shard::RestoreReport report;
  std::unique_ptr<Shard> shard = CheckpointingShard(dir, &report);
  RegisterJobResponse resp;
  ASSERT_TRUE(shard->RegisterJob(reg, &resp).ok());
  auto push = [&](uint32_t w, uint64_t step) {
    PushResponse r;
    ASSERT_TRUE(
        shard
            ->Push(PushRequestFor<PushRequest>(reg, w, step, AllChunks(), 0),
                   &r)
            .ok());
  };
  auto written = [&]() {
    shard->FlushCheckpoints();
    return StatsOf(*shard, "j").checkpoints();
  };
  EXPECT_EQ(written(), 1u);  // registration
  push(0, 0);
  push(0, 1);
  push(1, 0);
  EXPECT_EQ(written(), 1u);  // the slowest worker has 1 step of 2
  push(1, 1);
  EXPECT_EQ(written(), 2u);  // every_steps 2
  const absl::Time now = absl::Now();
  shard->CheckCheckpoints(now + absl::Minutes(30));
  EXPECT_EQ(written(), 2u);  // not due yet
  shard->CheckCheckpoints(now + absl::Hours(2));
  EXPECT_EQ(written(), 2u);  // due, but nothing changed
  push(0, 2);
  shard->CheckCheckpoints(now + absl::Hours(2));
  EXPECT_EQ(written(), 3u);
}

TEST(ShardCheckpointTest, NoCheckpointDirRunsWithAWarning) {
  Shard shard(ShardOptions{});
  const RegisterJobRequest reg = Registration("j", CheckpointSpec(BSP, 1));
  RegisterJobResponse resp;
  ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
  BspStep(shard, reg, 0);
  const JobStats s = StatsOf(shard, "j");
  EXPECT_EQ(Rejected(s, "no_checkpoint_dir"), 1u);
  EXPECT_EQ(s.checkpoints(), 0u);
  absl::Status st = shard.CheckpointNow("j");
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(st.message()), HasSubstr("no checkpoint_dir"));
  Shard::RestoreReport report;
  EXPECT_TRUE(shard.OpenCheckpoints(&report).ok());  // no dir: a no-op
}

// The newest file damaged: the previous one is used and the damaged one
// named; re-registration of a restored job is idempotent; dropping it
// deletes its checkpoints.
TEST(ShardCheckpointTest, CorruptNewestFallsBackThenDropDeletes) {
  const RegisterJobRequest reg = Registration("j", CheckpointSpec(BSP, 1000));
  const std::string dir = CheckpointDir("corrupt_newest");
  uint64_t initial;
  {
    Shard::RestoreReport report;
    std::unique_ptr<Shard> a = CheckpointingShard(dir, &report);
    RegisterJobResponse resp;
    ASSERT_TRUE(a->RegisterJob(reg, &resp).ok());
    initial = Checksum(*a, "j");
    BspStep(*a, reg, 0);
    ASSERT_TRUE(a->CheckpointNow("j").ok());
  }  // nothing changed since: no last checkpoint
  absl::StatusOr<std::unique_ptr<CheckpointStore>> store =
      CheckpointStore::Open(dir, 0);
  ASSERT_TRUE(store.ok());
  const std::string newest = (*store)->PathFor("j", 2);
  {
    std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << newest;
    f.seekp(100);
    f.put('\x5a');
  }
  Shard::RestoreReport report;
  std::unique_ptr<Shard> b = CheckpointingShard(dir, &report);
  ASSERT_EQ(report.restored.size(), 1u);
  EXPECT_THAT(report.restored[0], HasSubstr((*store)->PathFor("j", 1)));
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_THAT(report.problems[0], HasSubstr(newest));
  EXPECT_THAT(report.problems[0], HasSubstr("checksum mismatch"));
  EXPECT_THAT(report.problems[0], HasSubstr("using the previous checkpoint"));
  EXPECT_EQ(Checksum(*b, "j"), initial);

  RegisterJobResponse again;
  ASSERT_TRUE(b->RegisterJob(reg, &again).ok());
  EXPECT_EQ(again.chunks_held(), 4u);
  EXPECT_EQ(Checksum(*b, "j"), initial);

  DropJobRequest drop;
  drop.set_job_id("j");
  ASSERT_TRUE(b->DropJob(drop).ok());
  EXPECT_TRUE((*store)->ListJobs()->empty());
  Shard::RestoreReport after;
  std::unique_ptr<Shard> c = CheckpointingShard(dir, &after);
  EXPECT_TRUE(after.restored.empty());
  EXPECT_TRUE(after.problems.empty());
}

// Eight workers on many chunks, every step checkpointed and gated: the same
// bits as without checkpoints, one checkpoint per step, nothing stuck.
TEST(ShardCheckpointTest, EightThreadsGatedBspMatchesSequential) {
  constexpr uint32_t kWorkers = 8;
  constexpr int kSteps = 10;
  JobSpec spec = CheckpointSpec(BSP, 1);
  spec.set_num_workers(kWorkers);
  spec.set_partition_bytes(4 * 16);  // 20 chunks
  const RegisterJobRequest reg = Registration("j", spec);
  std::vector<uint32_t> all(reg.placement().chunks_size());
  std::iota(all.begin(), all.end(), 0);

  const std::vector<std::vector<float>> sequential =
      SequentialBspParams(reg, kWorkers, kSteps);
  RegisterJobResponse resp;

  Shard::RestoreReport report;
  std::unique_ptr<Shard> threaded =
      CheckpointingShard(CheckpointDir("eight_gated"), &report);
  ASSERT_TRUE(threaded->RegisterJob(reg, &resp).ok());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (uint32_t w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      for (int t = 0; t < kSteps; ++t) {
        std::vector<uint32_t> order = all;
        std::rotate(order.begin(), order.begin() + (w * 3 + t) % order.size(),
                    order.end());
        // Two requests per step, as a client splitting its chunks would.
        const size_t half = order.size() / 2;
        std::vector<std::vector<uint32_t>> parts = {
            {order.begin(), order.begin() + half},
            {order.begin() + half, order.end()}};
        std::vector<std::unique_ptr<PushPullCall>> calls;
        for (const auto& part : parts) {
          calls.push_back(StartPushPull(
              *threaded, PushRequestFor<PushPullRequest>(reg, w, t, part, t)));
        }
        for (auto& c : calls) {
          if (!c->done.WaitForNotificationWithTimeout(absl::Seconds(30)) ||
              !c->status.ok()) {
            ++failures;
            continue;
          }
          for (const ChunkData& d : c->resp.parameters()) {
            if (d.version() != static_cast<uint64_t>(t + 1)) ++failures;
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(Params(*threaded, "j"), sequential);
  EXPECT_EQ(StatsOf(*threaded, "j").checkpoints(), 1u + kSteps);
  EXPECT_EQ(threaded->PendingWaits(), 0u);
}

}  // namespace
}  // namespace shard_test
}  // namespace ps
