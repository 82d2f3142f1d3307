// Issue 27: a stop request (SIGTERM) during a daemon's start-up waits ends
// it within a second. psd 0 of a two-shard cluster waits for shard 1's
// address file before it opens the coordinator (it used to wait out its
// 60 s there); workerd waits for the coordinator's address file (10 s per
// try). Each is stopped while it waits, with no other process running.
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"
#include "tests/subprocess.h"

namespace ps {
namespace {

// The target: SIGTERM to exit.
constexpr absl::Duration kStopBound = absl::Seconds(1);

// SIGTERMs `p` and expects exit code 0 within kStopBound.
void ExpectQuickStop(Subprocess& p, const std::string& name) {
  const absl::Time start = absl::Now();
  absl::StatusOr<int> code = p.Stop(absl::Seconds(30));
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(code.ok()) << name << ": " << code.status();
  EXPECT_EQ(*code, 0) << name;
  EXPECT_LT(took, kStopBound) << name << " took " << took << " to stop";
}

TEST(StopAtStartTest, PsdWaitingForAShardAddressStopsAtOnce) {
  LocalClusterOptions options;
  options.shards = 2;
  options.workers = 0;
  LocalCluster cluster(TestDir("stop_psd"), options);
  ASSERT_TRUE(cluster.WriteClusterFile().ok());
  // Returns once psd 0 listens (its address file); from then on its
  // coordinator waits for s1.addr, which never comes.
  ASSERT_TRUE(cluster.StartShard(0).ok());
  ExpectQuickStop(cluster.shard(0), "psd 0");
}

TEST(StopAtStartTest, WorkerdWaitingForTheCoordinatorStopsAtOnce) {
  LocalClusterOptions options;
  options.shards = 1;
  options.workers = 1;
  options.metrics = true;
  LocalCluster cluster(TestDir("stop_workerd"), options);
  ASSERT_TRUE(cluster.WriteClusterFile().ok());
  ASSERT_TRUE(cluster.StartWorker(0).ok());
  // workerd writes its metrics address before it looks for the
  // coordinator; no psd runs, so it then waits for s0.addr.
  ASSERT_TRUE(cluster.MetricsAddress("w", 0).ok());
  ExpectQuickStop(cluster.worker(0), "workerd");
}

}  // namespace
}  // namespace ps
