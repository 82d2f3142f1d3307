#include "server/coordinator/worker_registry.h"

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
using ::testing::UnorderedElementsAre;

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

std::vector<std::string> Ids(const std::vector<WorkerRegistry::Worker*>& ws) {
  std::vector<std::string> ids;
  for (const WorkerRegistry::Worker* w : ws) ids.push_back(w->id);
  return ids;
}

TEST(WorkerRegistryTest, AddNumbersWorkersAndRemoveForgetsThem) {
  WorkerRegistry workers;
  WorkerRegistry::Worker& a = workers.Add("host-a", kT0);
  WorkerRegistry::Worker& b = workers.Add("host-a", kT0);
  EXPECT_EQ(a.id, "w-1");
  EXPECT_EQ(b.id, "w-2");
  EXPECT_EQ(a.last_seen, kT0);
  EXPECT_EQ(workers.size(), 2u);
  EXPECT_THAT(workers.IdsNamed("host-a"), UnorderedElementsAre("w-1", "w-2"));
  EXPECT_EQ(workers.Find("w-2"), &b);
  std::unique_ptr<WorkerRegistry::Worker> removed = workers.Remove("w-1");
  ASSERT_NE(removed, nullptr);
  EXPECT_EQ(removed->name, "host-a");
  EXPECT_EQ(workers.Find("w-1"), nullptr);
  EXPECT_EQ(workers.Remove("w-1"), nullptr);
  EXPECT_EQ(workers.Add("host-c", kT0).id, "w-3");  // ids are never reused
}

TEST(WorkerRegistryTest, IdleWorkersInRegistrationOrder) {
  WorkerRegistry workers;
  for (const char* name : {"a", "b", "c", "d", "e"}) workers.Add(name, kT0);
  WorkerRegistry::AssignRank(*workers.Find("w-2"), "job-1", 0, 0);
  WorkerRegistry::AssignRank(*workers.Find("w-4"), "job-2", 0, 7);
  EXPECT_EQ(workers.Find("w-4")->start_step, 7u);
  EXPECT_THAT(Ids(workers.IdleInOrder()), ElementsAre("w-1", "w-3", "w-5"));
}

TEST(WorkerRegistryTest, ReleaseFreesOnlyTheJobsOwnWorkers) {
  WorkerRegistry workers;
  WorkerRegistry::Worker& a = workers.Add("a", kT0);
  WorkerRegistry::Worker& b = workers.Add("b", kT0);
  WorkerRegistry::AssignRank(a, "job-1", 0, 0);
  WorkerRegistry::AssignRank(b, "job-2", 0, 0);  // moved on to another job
  workers.ReleaseFromJob({"w-1", "w-2", "w-9"}, "job-1", "job job-1 FAILED");
  EXPECT_EQ(a.job_id, "");
  EXPECT_EQ(a.abort_reason, "job job-1 FAILED");
  EXPECT_EQ(b.job_id, "job-2");
  EXPECT_EQ(b.abort_reason, "");
  WorkerRegistry::AssignRank(b, "job-3", 0, 0);
  workers.ReleaseFromJob({"w-2"}, "job-3", "");  // succeeded: no abort
  EXPECT_EQ(b.job_id, "");
  EXPECT_EQ(b.abort_reason, "");
}

TEST(WorkerRegistryTest, SilentWorkersInRegistrationOrder) {
  WorkerRegistry workers;
  for (int i = 0; i < 20; ++i) workers.Add("host", kT0);
  workers.Find("w-7")->last_seen = kT0 + absl::Seconds(5);
  std::vector<WorkerRegistry::Silent> silent =
      workers.SilentAt(kT0 + absl::Seconds(10), absl::Seconds(10));
  ASSERT_EQ(silent.size(), 19u);
  for (size_t i = 1; i < silent.size(); ++i) {
    EXPECT_LT(workers.Find(silent[i - 1].id)->seq,
              workers.Find(silent[i].id)->seq);
  }
  EXPECT_EQ(silent[0].silent, absl::Seconds(10));
  EXPECT_TRUE(
      workers.SilentAt(kT0 + absl::Seconds(9), absl::Seconds(10)).empty());
}

// A worker whose RegisterWorker has not answered yet (the call starts a
// job and waits for its RegisterJob on the shards) cannot heartbeat: it is
// never silent; before, a job that took longer than the heartbeat timeout
// to register lost the worker it had just taken.
TEST(WorkerRegistryTest, AWorkerStillRegisteringIsNeverSilent) {
  WorkerRegistry workers;
  workers.Add("host", kT0).registering = true;
  workers.Add("host", kT0);
  std::vector<WorkerRegistry::Silent> silent =
      workers.SilentAt(kT0 + absl::Seconds(60), absl::Seconds(10));
  ASSERT_EQ(silent.size(), 1u);
  EXPECT_EQ(silent[0].id, "w-2");
}

TEST(WorkerRegistryTest, PollsCompleteOnceAndOnlyAfterRun) {
  WorkerRegistry workers;
  WorkerRegistry::Worker& a = workers.Add("a", kT0);
  WorkerRegistry::Worker& b = workers.Add("b", kT0);
  GetAssignmentResponse ra, rb;
  std::vector<std::string> log;
  WorkerRegistry::Park(
      a, &ra, [&](absl::Status s) { log.push_back("a " + s.ToString()); },
      kT0 + absl::Seconds(1));
  WorkerRegistry::Park(
      b, &rb, [&](absl::Status s) { log.push_back("b " + s.ToString()); },
      kT0 + absl::Seconds(5));
  CompletedPolls done;
  workers.ExpirePolls(kT0 + absl::Seconds(1), done);
  EXPECT_TRUE(log.empty());  // callbacks wait for Run
  EXPECT_FALSE(a.poll_done);
  EXPECT_EQ(a.poll_response, nullptr);
  EXPECT_TRUE(b.poll_done);
  done.Run();
  EXPECT_THAT(log, ElementsAre("a OK"));
  workers.CompleteAllPolls(absl::UnavailableError("down"), done);
  WorkerRegistry::CompletePoll(b, absl::OkStatus(), done);  // none left
  done.Run();
  EXPECT_THAT(log, ElementsAre("a OK", "b UNAVAILABLE: down"));
}

}  // namespace
}  // namespace ps
