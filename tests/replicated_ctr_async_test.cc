// The CTR workload (a sparse table "emb" and a dense MLP) under ASP, and
// under SSP, with replication: 2 and no checkpoints on 3 psd + 2 workerd
// (docs/OPERATIONS.md "Replication"). Each table push a shard applies is
// forwarded to the backup of its rows (server/internal/table_replicas.h)
// with its (worker, step), and answered only once every live backup holds
// it. Mid-job shard 1 (the primary of its rows) is SIGKILLed: shard 2
// serves its rows from its copy, the workers resend what was not answered
// with the same (worker, step), and the job ends SUCCEEDED.
//
// The count: every step of a worker pushes once to every shard's rows
// (core/sparse_ids.h places them on every shard), and under ASP and SSP a
// copy's tables version counts the pushes applied to it. With no
// acknowledged push lost and none applied twice, each shard's rows, read
// from the shard that serves them at the end, are at version workers x
// steps per worker: every step was acknowledged (the job succeeded).
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/security.h"
#include "core/sparse_ids.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "proto/ps.grpc.pb.h"
#include "tests/job_parameters.h"
#include "tests/local_cluster.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/ctr_job.h"

namespace ps {
namespace {

constexpr int kShards = 3;
constexpr uint32_t kWorkers = 2;
constexpr uint32_t kBatch = 256;
// Steps of each worker: its half of the examples in batches of 256.
constexpr uint64_t kStepsPerWorker = 256;
constexpr uint64_t kKillAfterStep = 20;

std::string Job(const AsyncMode& mode) {
  CtrJob job;
  job.name = absl::StrCat("replicated-ctr-", mode.name);
  job.hidden = {32};
  job.synthetic_train = kStepsPerWorker * kWorkers * kBatch;
  job.synthetic_test = 4096;
  job.extra = "replication: 2";
  return absl::StrReplaceAll(CtrJobSpec(job),
                             {{"mode: BSP", std::string(mode.consistency)}});
}

// The tables version of shard `table_shard`'s rows as the shard at
// `address` serves them (a pull of one of its rows as worker 0).
absl::StatusOr<uint64_t> ServedTablesVersion(const std::string& address,
                                             const std::string& job,
                                             uint32_t table_shard) {
  uint64_t id = 0;
  while (ShardForId(id, kShards) != table_shard) ++id;
  SparseExchangeRequest req;
  req.set_job_id(job);
  req.set_table_shard(table_shard);
  SparseRows* pull = req.add_pull();
  pull->set_table("emb");
  pull->set_ids(std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
  Security security;
  auto stub = ParameterServer::NewStub(security.NewChannel(address));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  SparseExchangeResponse resp;
  grpc::Status st = stub->SparseExchange(&ctx, req, &resp);
  if (!st.ok()) {
    return absl::UnavailableError(absl::StrCat("pull of shard ", table_shard,
                                               "'s rows from ", address, ": ",
                                               st.error_message()));
  }
  return resp.version();
}

class ReplicatedCtrAsyncTest : public ::testing::TestWithParam<AsyncMode> {};

INSTANTIATE_TEST_SUITE_P(Modes, ReplicatedCtrAsyncTest,
                         ::testing::ValuesIn(AsyncModes()), AsyncModeName);

TEST_P(ReplicatedCtrAsyncTest, KilledPrimaryLosesNoAcknowledgedTablePush) {
  LocalCluster cluster(TestDir(absl::StrCat(GetParam().name, "-ctr")),
                       ThreeShardsOutlastingFailover());
  ASSERT_TRUE(cluster.Start().ok());
  absl::StatusOr<RunningJob> job = StartJobUntilStep(
      cluster, Job(GetParam()), kShards, kKillAfterStep, absl::Seconds(120));
  ASSERT_TRUE(job.ok()) << job.status();
  const uint64_t step = JobStep(cluster, job->id);
  ASSERT_LT(step + 20, kStepsPerWorker)
      << "the job ran nearly to its end before the kill (a machine too slow "
         "for this test's timing)";
  const absl::Time killed_at = absl::Now();
  absl::Status failed_over =
      KillAndAwaitFailover(cluster, 1, 1, absl::Seconds(30));
  ASSERT_TRUE(failed_over.ok()) << failed_over;
  std::cout << "shard 1 killed at step " << step << ", failed over after "
            << absl::FormatDuration(absl::Now() - killed_at) << std::endl;

  absl::StatusOr<JobStatus> end = AwaitSuccess(
      cluster, job->id, absl::Seconds(240), {"psd0", "psd2", "worker0"});
  ASSERT_TRUE(end.ok() && end->state() == SUCCEEDED);

  // Shard 1's rows are served by shard 2, its ring's successor.
  const std::vector<std::string> serving = {
      job->addresses[0], job->addresses[2], job->addresses[2]};
  const uint64_t acknowledged = kWorkers * kStepsPerWorker;
  for (uint32_t s = 0; s < kShards; ++s) {
    absl::StatusOr<uint64_t> version =
        ServedTablesVersion(serving[s], job->id, s);
    ASSERT_TRUE(version.ok()) << version.status();
    EXPECT_EQ(*version, acknowledged)
        << "shard " << s << "'s rows: applied pushes != acknowledged ("
        << (*version < acknowledged ? "lost" : "applied twice") << ")";
  }
  absl::StatusOr<JobStats> s2 = ReadShardJobStats(job->addresses[2], job->id);
  ASSERT_TRUE(s2.ok()) << s2.status();
  EXPECT_EQ(s2->replica_epoch(), 1u);
  if (HasFailure()) {
    for (const char* name : {"worker0", "worker1", "psd0", "psd2"}) {
      std::cout << "--- " << name << " ---\n" << cluster.Log(name) << "\n";
    }
  }
  std::cout << "every shard's rows at version " << acknowledged << " = "
            << kWorkers << " workers x " << kStepsPerWorker
            << " acknowledged steps; test auc " << end->progress().test_auc()
            << std::endl;
  (void)cluster.Stop();  // the killed shard exits by SIGKILL: reported
}

}  // namespace
}  // namespace ps
