// ReplicaMonitor with fake shards and store: a shard that misses the
// heartbeats is failed over under a new epoch committed before any shard
// hears of it; a failed commit tells nobody; addresses redirect to the
// successor on the ring.
#include "server/coordinator/replica_monitor.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;

struct Fake {
  std::vector<bool> down = {false, false, false};
  // (shard, epoch) of every view a live shard took, in order.
  std::vector<std::pair<uint32_t, uint64_t>> seen;
  std::vector<uint64_t> committed;
  absl::Status commit_status;

  ReplicaMonitor::Options Options() {
    ReplicaMonitor::Options o;
    o.num_shards = 3;
    o.misses = 2;
    o.send = [this](uint32_t s, const SetReplicaViewRequest& v, absl::Time) {
      if (down[s]) return absl::UnavailableError("connection refused");
      seen.push_back({s, v.epoch()});
      return absl::OkStatus();
    };
    o.commit = [this](uint64_t epoch, const std::vector<uint32_t>&) {
      if (commit_status.ok()) committed.push_back(epoch);
      return commit_status;
    };
    o.addresses = [] { return std::vector<std::string>{"a:0", "b:1", "c:2"}; };
    return o;
  }
};

TEST(ReplicaMonitorTest, FailsOverAfterTheMissesUnderACommittedEpoch) {
  Fake fake;
  ReplicaMonitor monitor(fake.Options());
  const absl::Time t0 = absl::Now();
  monitor.Beat(t0);
  EXPECT_EQ(monitor.epoch(), 0u);
  fake.down[1] = true;
  monitor.Beat(t0);  // one miss: nothing yet
  EXPECT_EQ(monitor.epoch(), 0u);
  EXPECT_TRUE(fake.committed.empty());
  fake.seen.clear();
  monitor.Beat(t0);  // two: failed over
  EXPECT_EQ(monitor.epoch(), 1u);
  EXPECT_THAT(monitor.failed(), ElementsAre(1u));
  EXPECT_THAT(fake.committed, ElementsAre(1u));
  EXPECT_EQ(monitor.live_shards(), 2u);
  // The beat's own views (epoch 0), then the new epoch to each live shard.
  EXPECT_THAT(fake.seen,
              ElementsAre(std::make_pair(0u, 0ull), std::make_pair(2u, 0ull),
                          std::make_pair(0u, 1ull), std::make_pair(2u, 1ull)));
  std::vector<std::string> addresses = {"a:0", "b:1", "c:2"};
  monitor.Redirect(&addresses);
  EXPECT_THAT(addresses, ElementsAre("a:0", "c:2", "c:2"));
}

TEST(ReplicaMonitorTest, AFailedCommitTellsNobodyAndIsRetried) {
  Fake fake;
  fake.commit_status = absl::UnavailableError("disk full");
  ReplicaMonitor monitor(fake.Options());
  fake.down[2] = true;
  monitor.Beat(absl::Now());
  monitor.Beat(absl::Now());
  EXPECT_EQ(monitor.epoch(), 0u);
  for (const auto& [shard, epoch] : fake.seen) EXPECT_EQ(epoch, 0u);
  fake.commit_status = absl::OkStatus();
  monitor.Beat(absl::Now());  // the next miss tries again
  EXPECT_EQ(monitor.epoch(), 1u);
  std::vector<std::string> addresses = {"a:0", "b:1", "c:2"};
  monitor.Redirect(&addresses);
  EXPECT_THAT(addresses, ElementsAre("a:0", "b:1", "a:0"));
}

TEST(ReplicaMonitorTest, NeverFailsTheLastShard) {
  Fake fake;
  ReplicaMonitor::Options o = fake.Options();
  o.failed = {0, 1};
  o.epoch = 4;
  ReplicaMonitor monitor(o);
  fake.down = {true, true, true};
  monitor.Beat(absl::Now());
  monitor.Beat(absl::Now());
  EXPECT_EQ(monitor.epoch(), 4u);
  EXPECT_THAT(monitor.failed(), ElementsAre(0u, 1u));
}

}  // namespace
}  // namespace ps
