// ReplicaMonitor with fake shards and store: a shard that misses the
// heartbeats is failed over under a new epoch committed before any shard
// hears of it; a failed commit tells nobody; a job's addresses redirect to
// its chunks' acting primaries: the successors on the job's ring.
#include "server/coordinator/replica_monitor.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/job.pb.h"
#include "server/coordinator/placement.h"

namespace ps {
namespace {

using ::testing::ElementsAre;

// A job on every one of 3 shards with k = 2: shard s holds chunk s, its
// backup on s + 1 (mod 3).
Placement Ring3() {
  Placement p;
  p.set_num_shards(3);
  for (uint32_t s = 0; s < 3; ++s) {
    ChunkPlacement* c = p.add_chunks();
    c->set_chunk_id(s);
    c->set_shard(s);
    c->add_backups((s + 1) % 3);
  }
  return p;
}

struct Fake {
  std::vector<bool> down = {false, false, false};
  // (shard, epoch) of every view a live shard took, in order.
  std::vector<std::pair<uint32_t, uint64_t>> seen;
  std::vector<uint64_t> committed;
  absl::Status commit_status;
  // What each shard answers as `behind` (joining shards it still copies).
  std::vector<std::vector<uint32_t>> behind = {{}, {}, {}};
  std::vector<uint32_t> rejoined_calls;
  absl::Status rejoin_status;
  // Each shard's process (SetReplicaViewResponse.incarnation), and what
  // every view a live shard took named: (shard, incarnation).
  std::vector<uint64_t> incarnation = {0, 0, 0};
  // What each shard answers as `lagging` (backups it cannot forward to).
  std::vector<std::vector<uint32_t>> lagging = {{}, {}, {}};
  // The lag_ms each view asked for.
  std::vector<uint32_t> lag_ms;
  std::vector<std::pair<uint32_t, uint64_t>> named;
  // A shard answers only a beat given at least this long (a busy one);
  // the time each beat was given, by shard.
  std::vector<absl::Duration> needs = {
      absl::ZeroDuration(), absl::ZeroDuration(), absl::ZeroDuration()};
  std::vector<std::vector<absl::Duration>> offered = {{}, {}, {}};

  ReplicaMonitor::Options Options() {
    ReplicaMonitor::Options o;
    o.num_shards = 3;
    o.misses = 2;
    o.send = [this](uint32_t s, const SetReplicaViewRequest& v,
                    absl::Time deadline, SetReplicaViewResponse* resp) {
      if (down[s]) return absl::UnavailableError("connection refused");
      offered[s].push_back(deadline - absl::Now());
      if (offered[s].back() < needs[s]) {
        return absl::DeadlineExceededError("the fake shard is busy");
      }
      seen.push_back({s, v.epoch()});
      named.push_back({v.shard(), v.incarnation()});
      resp->set_incarnation(incarnation[s]);
      for (uint32_t b : lagging[s]) resp->add_lagging(b);
      lag_ms.push_back(v.lag_ms());
      for (uint32_t b : behind[s]) resp->add_behind(b);
      return absl::OkStatus();
    };
    o.commit = [this](uint64_t epoch, const ReplicaSets&) {
      if (commit_status.ok()) committed.push_back(epoch);
      return commit_status;
    };
    o.rejoin = [this](uint32_t s) {
      rejoined_calls.push_back(s);
      return rejoin_status;
    };
    o.addresses = [] { return std::vector<std::string>{"a:0", "b:1", "c:2"}; };
    return o;
  }
};

TEST(ReplicaMonitorTest, FailsOverAfterTheMissesUnderACommittedEpoch) {
  const Placement ring = Ring3();
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
  // The beat's own views (epoch 0), then the new epoch to each live shard.
  EXPECT_THAT(fake.seen,
              ElementsAre(std::make_pair(0u, 0ull), std::make_pair(2u, 0ull),
                          std::make_pair(0u, 1ull), std::make_pair(2u, 1ull)));
  std::vector<std::string> addresses = {"a:0", "b:1", "c:2"};
  monitor.Redirect(&ring, &addresses);
  EXPECT_THAT(addresses, ElementsAre("a:0", "c:2", "c:2"));
}

TEST(ReplicaMonitorTest, AFailedCommitTellsNobodyAndIsRetried) {
  const Placement ring = Ring3();
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
  monitor.Redirect(&ring, &addresses);
  EXPECT_THAT(addresses, ElementsAre("a:0", "b:1", "a:0"));
}

TEST(ReplicaMonitorTest, NeverFailsTheLastShard) {
  Fake fake;
  ReplicaMonitor::Options o = fake.Options();
  o.sets.failed = {0, 1};
  o.epoch = 4;
  ReplicaMonitor monitor(o);
  fake.down = {true, true, true};
  monitor.Beat(absl::Now());
  monitor.Beat(absl::Now());
  EXPECT_EQ(monitor.epoch(), 4u);
  EXPECT_THAT(monitor.failed(), ElementsAre(0u, 1u));
}

TEST(ReplicaMonitorTest, AFailedShardThatAnswersRejoinsAndCatchesUp) {
  const Placement ring = Ring3();
  Fake fake;
  ReplicaMonitor monitor(fake.Options());
  fake.down[1] = true;
  monitor.Beat(absl::Now());
  monitor.Beat(absl::Now());
  ASSERT_EQ(monitor.epoch(), 1u);
  // Back, but its registration fails: it stays failed, nothing committed.
  fake.down[1] = false;
  fake.rejoin_status = absl::ResourceExhaustedError("over budget");
  monitor.Beat(absl::Now());
  EXPECT_EQ(monitor.epoch(), 1u);
  EXPECT_THAT(fake.rejoined_calls, ElementsAre(1u));
  // Registered: joining under epoch 2, still served by shard 2.
  fake.rejoin_status = absl::OkStatus();
  fake.behind[2] = {1};
  monitor.Beat(absl::Now());
  EXPECT_EQ(monitor.epoch(), 2u);
  EXPECT_THAT(monitor.sets().joining, ElementsAre(1u));
  EXPECT_TRUE(monitor.failed().empty());
  std::vector<std::string> addresses = {"a:0", "b:1", "c:2"};
  monitor.Redirect(&ring, &addresses);
  EXPECT_THAT(addresses, ElementsAre("a:0", "c:2", "c:2"));
  // Shard 2 still copies to it: no change.
  monitor.Beat(absl::Now());
  EXPECT_EQ(monitor.epoch(), 2u);
  // Caught up: a backup again (rejoined) under epoch 3; shard 2 still
  // serves shard 1's chunks.
  fake.behind[2] = {};
  monitor.Beat(absl::Now());
  EXPECT_EQ(monitor.epoch(), 3u);
  EXPECT_TRUE(monitor.sets().joining.empty());
  EXPECT_THAT(monitor.sets().rejoined, ElementsAre(1u));
  EXPECT_THAT(fake.committed, ElementsAre(1u, 2u, 3u));
  addresses = {"a:0", "b:1", "c:2"};
  monitor.Redirect(&ring, &addresses);
  EXPECT_THAT(addresses, ElementsAre("a:0", "c:2", "c:2"));
  // Shard 2 dies: shard 1 is the only copy of its own chunks left and
  // serves them; shard 2's go to shard 0.
  fake.down[2] = true;
  monitor.Beat(absl::Now());
  monitor.Beat(absl::Now());
  EXPECT_EQ(monitor.epoch(), 4u);
  EXPECT_THAT(monitor.failed(), ElementsAre(2u));
  addresses = {"a:0", "b:1", "c:2"};
  monitor.Redirect(&ring, &addresses);
  EXPECT_THAT(addresses, ElementsAre("a:0", "b:1", "a:0"));
}

TEST(ReplicaMonitorTest, AFailedShardsAddressHeldByAnotherShardIsNoRejoin) {
  Fake fake;
  ReplicaMonitor::Options o = fake.Options();
  o.sets.failed = {1};
  o.epoch = 1;
  // Shard 1's address file now names shard 2: shard 2 answers there.
  o.addresses = [] { return std::vector<std::string>{"a:0", "c:2", "c:2"}; };
  ReplicaMonitor monitor(o);
  monitor.Beat(absl::Now());
  EXPECT_TRUE(fake.rejoined_calls.empty());
  EXPECT_EQ(monitor.epoch(), 1u);
}

TEST(ReplicaMonitorTest, AJoiningShardIsNotCaughtUpWhileAShardIsSilent) {
  Fake fake;
  ReplicaMonitor::Options o = fake.Options();
  o.sets.joining = {1};
  o.epoch = 2;
  ReplicaMonitor monitor(o);
  fake.down[0] = true;  // one miss: its answer is unknown
  monitor.Beat(absl::Now());
  EXPECT_EQ(monitor.epoch(), 2u);
  EXPECT_THAT(monitor.sets().joining, ElementsAre(1u));
  fake.down[0] = false;
  monitor.Beat(absl::Now());
  EXPECT_THAT(monitor.sets().rejoined, ElementsAre(1u));
}

TEST(ReplicaMonitorTest, AShardRestartedOnItsAddressIsFailedOverAtOnce) {
  Fake fake;
  fake.incarnation = {10, 20, 30};
  ReplicaMonitor monitor(fake.Options());
  monitor.Beat(absl::Now());
  monitor.Beat(absl::Now());
  // Each view names its shard and, once heard, the shard's process.
  EXPECT_THAT(
      fake.named,
      ElementsAre(std::make_pair(0u, 0ull), std::make_pair(1u, 0ull),
                  std::make_pair(2u, 0ull), std::make_pair(0u, 10ull),
                  std::make_pair(1u, 20ull), std::make_pair(2u, 30ull)));
  // Shard 1 restarts on its address between two beats: it answers the
  // next one, as a new process, and is failed over without a miss.
  fake.incarnation[1] = 21;
  fake.named.clear();
  monitor.Beat(absl::Now());
  EXPECT_EQ(monitor.epoch(), 1u);
  EXPECT_THAT(monitor.failed(), ElementsAre(1u));
  // The new epoch names the new process to it.
  using Named = std::pair<uint32_t, uint64_t>;
  EXPECT_EQ(fake.named.back(), Named(2, 30));
  EXPECT_EQ(fake.named[fake.named.size() - 2], Named(1, 21));
  // It answers: it rejoins as a backup.
  monitor.Beat(absl::Now());
  EXPECT_THAT(fake.rejoined_calls, ElementsAre(1u));
  EXPECT_THAT(monitor.sets().joining, ElementsAre(1u));
  EXPECT_EQ(monitor.epoch(), 2u);
}

TEST(ReplicaMonitorTest, ABackupThatFallsBehindIsFailedOver) {
  Fake fake;
  ReplicaMonitor monitor(fake.Options());
  monitor.Beat(absl::Now());
  // Asked for: max(heartbeat x misses (100 ms x 2), min_lag (5 s)).
  EXPECT_EQ(fake.lag_ms.back(), 5000u);
  // Shard 1 answers every heartbeat, but shard 0 cannot forward to it.
  fake.lagging[0] = {1};
  monitor.Beat(absl::Now());
  EXPECT_EQ(monitor.epoch(), 1u);
  EXPECT_THAT(monitor.failed(), ElementsAre(1u));
  // Still alive: it rejoins at the next beat, copying its replicas in.
  fake.lagging[0] = {};
  monitor.Beat(absl::Now());
  EXPECT_THAT(fake.rejoined_calls, ElementsAre(1u));
  EXPECT_THAT(monitor.sets().joining, ElementsAre(1u));
  // Heartbeats slower than the floor: heartbeat x misses (100 ms x 80).
  Fake slow;
  ReplicaMonitor::Options o = slow.Options();
  o.misses = 80;
  ReplicaMonitor patient(o);
  patient.Beat(absl::Now());
  EXPECT_EQ(slow.lag_ms.back(), 8000u);
}

// A busy shard (a big step holds its cores) answers late: each beat that
// runs out of time doubles its next one's deadline (up to 2 s), so one that
// needs 300 ms is not failed over at 2 misses of 200 ms; one that needs far
// more is, after beats of 200 and 400 ms. A refused connection misses at
// once.
TEST(ReplicaMonitorTest, ABusyShardGetsLongerBeatsNotAFailover) {
  Fake fake;
  ReplicaMonitor monitor(fake.Options());  // 100 ms x 2 misses
  fake.needs[1] = absl::Milliseconds(300);
  for (int i = 0; i < 4; ++i) monitor.Beat(absl::Now());
  EXPECT_TRUE(monitor.failed().empty());
  EXPECT_EQ(monitor.epoch(), 0u);
  ASSERT_GE(fake.offered[1].size(), 3u);
  EXPECT_LE(fake.offered[1][0], absl::Milliseconds(200));
  EXPECT_GT(fake.offered[1][1], absl::Milliseconds(300));  // 400 ms
  EXPECT_LE(fake.offered[1][2], absl::Milliseconds(200));  // halved again
  fake.needs[1] = absl::Hours(1);
  fake.offered[1].clear();
  monitor.Beat(absl::Now());
  monitor.Beat(absl::Now());
  EXPECT_THAT(monitor.failed(), ElementsAre(1u));
  EXPECT_GT(fake.offered[1][1], absl::Milliseconds(300));
  // Failed, its beats stay short (they would hold up the others').
  fake.offered[1].clear();
  monitor.Beat(absl::Now());
  monitor.Beat(absl::Now());
  for (absl::Duration d : fake.offered[1]) {
    EXPECT_LE(d, absl::Milliseconds(200));
  }
  // Refused: two beats, two misses, whatever the deadlines.
  fake.down[2] = true;
  monitor.Beat(absl::Now());
  monitor.Beat(absl::Now());
  EXPECT_THAT(monitor.failed(), ElementsAre(1u, 2u));
}

// A primary cut off from the coordinator alone goes on forwarding, and
// its backup, told of the failover, refuses it; back in reach, it answers
// the heartbeats with those failures. It is joining (nobody's primary):
// its report must not fail the live backup over (as it once did, cascading
// into a second failover of a healthy shard).
TEST(ReplicaMonitorTest, AJoiningShardsStaleLaggingReportFailsNobody) {
  Fake fake;
  ReplicaMonitor monitor(fake.Options());
  fake.down[1] = true;
  monitor.Beat(absl::Now());
  monitor.Beat(absl::Now());
  ASSERT_THAT(monitor.failed(), ElementsAre(1u));
  fake.down[1] = false;
  fake.lagging[1] = {2};
  fake.behind[2] = {1};
  monitor.Beat(absl::Now());  // answers while failed: rejoins
  ASSERT_THAT(monitor.sets().joining, ElementsAre(1u));
  monitor.Beat(absl::Now());  // answers while joining, still "lagging 2"
  EXPECT_TRUE(monitor.failed().empty());
  EXPECT_EQ(monitor.epoch(), 2u);
  // Once it is a backup again its reports count as any primary's.
  fake.behind[2] = {};
  monitor.Beat(absl::Now());
  ASSERT_THAT(monitor.sets().rejoined, ElementsAre(1u));
  monitor.Beat(absl::Now());
  EXPECT_THAT(monitor.failed(), ElementsAre(2u));
}

// 16 chunks of one tensor, placed as submit does for `shards` / `ids`
// (JobSpec.shards, shard_ids) with k copies on `num_shards`.
Placement PlaceJob(uint32_t num_shards, uint32_t shards,
                   const std::vector<uint32_t>& ids, uint32_t k) {
  JobSpec spec;
  spec.set_partition_bytes(1024);
  TensorSpec* t = spec.add_tensors();
  t->set_name("w");
  t->add_shape(4096);
  spec.set_shards(shards);
  for (uint32_t id : ids) spec.add_shard_ids(id);
  spec.set_replication(k);
  absl::StatusOr<Placement> p = PlaceChunks(spec, num_shards);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : Placement();
}

JobSpec PlaceJobSpec(uint32_t shards, const std::vector<uint32_t>& ids) {
  JobSpec spec;
  spec.set_shards(shards);
  for (uint32_t id : ids) spec.add_shard_ids(id);
  return spec;
}

std::vector<std::string> Addresses(uint32_t n) {
  std::vector<std::string> out;
  for (uint32_t s = 0; s < n; ++s) out.push_back(absl::StrCat("s", s, ":1"));
  return out;
}

// With every shard of the job failed in turn, each of its chunks is
// reached at its first live copy: for a job on some of the shards that is
// the next shard of the job, not of the cluster (the cluster's next shard
// holds none of its copies). Before, `shards: 2` of 3 sent shard 1's
// chunks to shard 2.
TEST(ReplicaMonitorTest, AJobsFailedShardIsReachedWhereItsBackupsAre) {
  struct Case {
    std::string label;
    uint32_t num_shards, shards;
    std::vector<uint32_t> ids;
    uint32_t k;
  };
  const std::vector<Case> cases = {
      {"every shard of 3", 3, 0, {}, 2},
      {"shards: 2 of 3", 3, 2, {}, 2},
      {"shards: 3 of 4, k = 3", 4, 3, {}, 3},
      {"shard_ids [1, 2] of 3", 3, 0, {1, 2}, 2},
      {"shard_ids [0, 2, 3] of 4", 4, 0, {0, 2, 3}, 2},
      {"shard_ids [1, 3] of 4", 4, 0, {1, 3}, 2},
  };
  for (const Case& c : cases) {
    const Placement placement = PlaceJob(c.num_shards, c.shards, c.ids, c.k);
    ASSERT_GT(placement.chunks_size(), 0) << c.label;
    for (uint32_t dead = 0; dead < c.num_shards; ++dead) {
      Fake fake;
      ReplicaMonitor::Options o = fake.Options();
      o.num_shards = c.num_shards;
      o.addresses = [n = c.num_shards] { return Addresses(n); };
      o.sets.failed = {dead};
      o.epoch = 1;
      ReplicaMonitor monitor(o);
      std::vector<std::string> addresses = Addresses(c.num_shards);
      monitor.Redirect(&placement, &addresses);
      for (const ChunkPlacement& chunk : placement.chunks()) {
        // Its copies lie on the job's shards; the first live one serves it.
        const uint32_t want =
            chunk.shard() != dead ? chunk.shard() : chunk.backups(0);
        EXPECT_EQ(addresses[chunk.shard()], Addresses(c.num_shards)[want])
            << c.label << ", shard " << dead << " failed, chunk "
            << chunk.chunk_id();
        const std::vector<uint32_t> set =
            ShardSet(PlaceJobSpec(c.shards, c.ids), c.num_shards);
        for (uint32_t b : chunk.backups()) {
          EXPECT_NE(std::find(set.begin(), set.end(), b), set.end())
              << c.label << ": backup " << b << " of chunk " << chunk.chunk_id()
              << " is not one of the job's shards";
        }
      }
    }
  }
  // The case of the review: 3 shards, `shards: 2`, shard 1 failed.
  Fake fake;
  ReplicaMonitor::Options o = fake.Options();
  o.sets.failed = {1};
  ReplicaMonitor monitor(o);
  const Placement two = PlaceJob(3, 2, {}, 2);
  std::vector<std::string> addresses = {"a:0", "b:1", "c:2"};
  monitor.Redirect(&two, &addresses);
  EXPECT_THAT(addresses, ElementsAre("a:0", "a:0", "c:2"));
}

TEST(ReplicaMonitorTest, ShardsAJobDoesNotServeFromGoToALiveShard) {
  Fake fake;
  ReplicaMonitor::Options o = fake.Options();
  o.sets.failed = {2};
  o.sets.joining = {1};
  ReplicaMonitor monitor(o);
  // No job (calls to every shard): a failed shard gets the next live one's
  // address, a joining one (alive) keeps its own.
  std::vector<std::string> addresses = {"a:0", "b:1", "c:2"};
  monitor.Redirect(nullptr, &addresses);
  EXPECT_THAT(addresses, ElementsAre("a:0", "b:1", "a:0"));
  // A job on shards 0 and 1 (k = 2): shard 1's chunks at shard 0; shard 2
  // holds none of them.
  const Placement two = PlaceJob(3, 2, {}, 2);
  addresses = {"a:0", "b:1", "c:2"};
  monitor.Redirect(&two, &addresses);
  EXPECT_THAT(addresses, ElementsAre("a:0", "a:0", "a:0"));
  // Without replicas a failed primary's chunks have no other copy: its
  // address stays (a restart there is where they come back).
  const Placement single = PlaceJob(3, 0, {}, 1);
  addresses = {"a:0", "b:1", "c:2"};
  monitor.Redirect(&single, &addresses);
  EXPECT_THAT(addresses, ElementsAre("a:0", "b:1", "c:2"));
}

}  // namespace
}  // namespace ps
