#include "server/coordinator/resharder.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// Shards whose chunks advance one version per PAUSE poll until the pause
// step; a shard whose chunks are past the asked step refuses it.
class FakeShards {
 public:
  explicit FakeShards(std::vector<uint64_t> versions)
      : versions_(std::move(versions)), jumps_(versions_.size(), 0) {}

  absl::Status Call(uint32_t shard, const ReshardRequest& r,
                    ReshardResponse* out) {
    absl::MutexLock l(&mu_);
    calls_.push_back(absl::StrCat(ReshardRequest::Phase_Name(r.phase()), " ",
                                  shard, " ", r.pause_step()));
    uint64_t& v = versions_[shard];
    switch (r.phase()) {
      case ReshardRequest::PAUSE:
        if (r.pause_step() == 0) {
          out->set_max_version(v);
          return absl::OkStatus();
        }
        // The job ran on between the probe and the first pause (per shard:
        // the calls to the shards run on threads of their own).
        v += jumps_[shard];
        jumps_[shard] = 0;
        if (v > r.pause_step()) {
          return absl::FailedPreconditionError("already past");
        }
        if (v < r.pause_step()) ++v;
        out->set_max_version(v);
        out->set_quiesced(v == r.pause_step());
        return absl::OkStatus();
      case ReshardRequest::PREPARE:
        if (fail_prepare_ == static_cast<int>(shard)) {
          return absl::ResourceExhaustedError("budget");
        }
        out->set_bytes_fetched(100 * (shard + 1));  // chunks and rows
        return absl::OkStatus();
      case ReshardRequest::ABORT:
        if (dead_aborts_[shard] > 0) {
          --dead_aborts_[shard];
          return absl::UnavailableError("connection refused");
        }
        return absl::OkStatus();
      case ReshardRequest::COMMIT:
        commits_.push_back(r);
        if (dead_commits_[shard] > 0) {  // dead, then restarted
          --dead_commits_[shard];
          return absl::UnavailableError("connection refused");
        }
        if (lost_prepare_ == static_cast<int>(shard)) {
          return absl::FailedPreconditionError("has no prepared placement");
        }
        return absl::OkStatus();
      default:
        return absl::OkStatus();
    }
  }
  // Shard `shard` fails its first `n` COMMITs as a dead shard does.
  void set_dead_commits(uint32_t shard, int n) {
    absl::MutexLock l(&mu_);
    dead_commits_[shard] = n;
  }
  // Shard `shard` fails its first `n` ABORTs as a dead shard does.
  void set_dead_aborts(uint32_t shard, int n) {
    absl::MutexLock l(&mu_);
    dead_aborts_[shard] = n;
  }
  // Shard `shard` came back without what it prepared.
  void set_lost_prepare(int shard) { lost_prepare_ = shard; }
  std::vector<ReshardRequest> commits() {
    absl::MutexLock l(&mu_);
    return commits_;
  }
  std::vector<std::string> Calls(const std::string& phase) {
    absl::MutexLock l(&mu_);
    std::vector<std::string> out;
    for (const std::string& c : calls_) {
      if (c.rfind(phase, 0) == 0) out.push_back(c);
    }
    return out;
  }
  void set_jump(uint32_t shard, uint64_t j) { jumps_[shard] = j; }
  void set_fail_prepare(int shard) { fail_prepare_ = shard; }

 private:
  absl::Mutex mu_;
  std::vector<uint64_t> versions_;
  std::vector<std::string> calls_;
  std::vector<uint64_t> jumps_;
  int fail_prepare_ = -1;
  std::map<uint32_t, int> dead_commits_;
  std::map<uint32_t, int> dead_aborts_;
  int lost_prepare_ = -1;
  std::vector<ReshardRequest> commits_;
};

Placement TwoChunks(uint32_t second_shard, uint64_t epoch) {
  Placement p;
  p.set_num_shards(2);
  p.set_epoch(epoch);
  ChunkPlacement* a = p.add_chunks();
  a->set_chunk_id(0);
  a->set_length(100);
  ChunkPlacement* b = p.add_chunks();
  b->set_chunk_id(1);
  b->set_length(50);
  b->set_shard(second_shard);
  return p;
}

struct Moved {
  ReshardStatus status;
  std::vector<Placement> committed;
  std::vector<std::string> phases;
};

Moved Move(FakeShards& shards,
           absl::Duration commit_deadline = absl::Seconds(60)) {
  Moved run;
  Resharder::Options options;
  options.num_shards = 2;
  options.poll = absl::ZeroDuration();
  options.commit_deadline = commit_deadline;
  options.commit_retry = absl::ZeroDuration();
  Resharder::Hooks hooks;
  hooks.reshard = [&](uint32_t s, const ReshardRequest& r, absl::Time,
                      ReshardResponse* out) { return shards.Call(s, r, out); };
  hooks.commit = [&](const Placement& p, const ReshardStatus&) {
    run.committed.push_back(p);
    return absl::OkStatus();
  };
  hooks.update = [&](const ReshardStatus& s) {
    run.phases.push_back(s.phase());
  };
  hooks.addresses = [] { return std::vector<std::string>{"a:1", "b:2"}; };
  hooks.clock = [] { return absl::Now(); };
  ReshardStatus start;
  start.set_target_shards(2);
  start.set_from_shards(1);
  run.status = Resharder(options, hooks)
                   .Run("job-1", TwoChunks(0, 0), TwoChunks(1, 1), start);
  return run;
}

// Copies fetched: a chunk whose shard changes, and with backups each copy
// on a shard that held none of that chunk (a role change is no fetch).
TEST(CountMovesTest, CountsTheCopiesAShardGains) {
  Placement from;
  from.set_num_shards(3);
  for (uint32_t i = 0; i < 2; ++i) {
    ChunkPlacement* c = from.add_chunks();
    c->set_chunk_id(i);
    c->set_shard(0);
    c->set_length(10);
  }
  Placement to = from;
  to.mutable_chunks(1)->set_shard(1);
  uint32_t chunks = 0;
  uint64_t bytes = 0;
  CountMoves(from, to, &chunks, &bytes);
  EXPECT_EQ(chunks, 1u);
  EXPECT_EQ(bytes, 40u);
  // k = 2: chunk 0 on (0, 1) becomes (1, 0), a swap of roles; chunk 1 on
  // (0, 1) becomes (1, 2), one copy gained on shard 2.
  for (ChunkPlacement& c : *from.mutable_chunks()) c.add_backups(1);
  to = from;
  to.mutable_chunks(0)->set_shard(1);
  to.mutable_chunks(0)->set_backups(0, 0);
  to.mutable_chunks(1)->set_shard(1);
  to.mutable_chunks(1)->set_backups(0, 2);
  CountMoves(from, to, &chunks, &bytes);
  EXPECT_EQ(chunks, 1u);
  EXPECT_EQ(bytes, 40u);
}

TEST(ResharderTest, PausesPastTheHighestVersionCopiesAndCommits) {
  FakeShards shards({7, 5});
  Moved run = Move(shards);
  EXPECT_EQ(run.status.phase(), "done");
  EXPECT_EQ(run.status.pause_step(), 9u);  // highest 7 + margin 2
  EXPECT_EQ(run.status.epoch(), 1u);
  EXPECT_EQ(run.status.moved_chunks(), 1u);
  EXPECT_EQ(run.status.moved_bytes(), 200u);
  EXPECT_EQ(run.status.fetched_bytes(), 300u);  // 100 + 200: every shard's
  EXPECT_GT(run.status.reached_s(), 0);
  ASSERT_EQ(run.committed.size(), 1u);
  EXPECT_EQ(run.committed[0].chunks(1).shard(), 1u);
  EXPECT_EQ(shards.Calls("PREPARE").size(), 2u);
  EXPECT_EQ(shards.Calls("COMMIT").size(), 2u);
  EXPECT_TRUE(shards.Calls("ABORT").empty());
  EXPECT_THAT(run.phases, ::testing::ElementsAre("pausing", "copying", "done"));
}

TEST(ResharderTest, AShardAlreadyPastThePauseStepMovesItFurther) {
  FakeShards shards({7, 5});
  shards.set_jump(0, 3);  // past 7 + 2 by the time the pause arrives
  Moved run = Move(shards);
  EXPECT_EQ(run.status.phase(), "done");
  // The first pause was refused and lifted, the next one 4x further ahead.
  EXPECT_EQ(shards.Calls("ABORT").size(), 2u);
  EXPECT_GT(run.status.pause_step(), 12u);
  EXPECT_EQ(run.committed.size(), 1u);
}

TEST(ResharderTest, AFailedPrepareAbortsEveryShardAndCommitsNothing) {
  FakeShards shards({3, 3});
  shards.set_fail_prepare(1);
  Moved run = Move(shards);
  EXPECT_THAT(run.status.phase(), HasSubstr("aborted: shard 1 PREPARE"));
  EXPECT_THAT(run.status.phase(), HasSubstr("budget"));
  EXPECT_TRUE(run.committed.empty());
  EXPECT_EQ(shards.Calls("ABORT").size(), 2u);
  EXPECT_TRUE(shards.Calls("COMMIT").empty());
}

// A move aborted after its PREPAREs (shard 1's failed) asks a shard that
// does not answer its ABORT again until it does: killed after writing what
// it prepared, it would come back paused with it.
TEST(ResharderTest, AnAbortAfterThePreparesReachesAShardThatCameBack) {
  FakeShards shards({3, 3});
  shards.set_fail_prepare(1);
  shards.set_dead_aborts(1, 2);
  Moved run = Move(shards);
  EXPECT_THAT(run.status.phase(), HasSubstr("aborted: shard 1 PREPARE"));
  EXPECT_TRUE(run.committed.empty());
  EXPECT_EQ(shards.Calls("ABORT 0").size(), 1u);
  EXPECT_EQ(shards.Calls("ABORT 1").size(), 3u);  // 2 failed, then OK
  EXPECT_TRUE(shards.Calls("COMMIT").empty());
}

// Once the store holds the new placement the move only goes forward: a
// shard dead at the COMMIT (its first three fail UNAVAILABLE) is asked
// again, alone, until it is back, and the move ends "done" on every shard,
// naming it late. Every COMMIT carries the placement and the pause step
// (what a restarted shard checks its prepared job against).
TEST(ResharderTest, AShardDeadAtTheCommitCommitsLateAndTheMoveIsDone) {
  FakeShards shards({3, 3});
  shards.set_dead_commits(1, 3);
  Moved run = Move(shards);
  EXPECT_EQ(run.status.phase(), "done");
  EXPECT_THAT(run.status.late_shards(), ::testing::ElementsAre(1u));
  EXPECT_GT(run.status.reached_s(), 0);
  EXPECT_TRUE(shards.Calls("ABORT").empty());
  ASSERT_EQ(run.committed.size(), 1u);
  // Shard 0 once, shard 1 four times (three failed, then OK).
  EXPECT_EQ(shards.Calls("COMMIT 0").size(), 1u);
  EXPECT_EQ(shards.Calls("COMMIT 1").size(), 4u);
  for (const ReshardRequest& c : shards.commits()) {
    EXPECT_EQ(c.epoch(), 1u);
    EXPECT_EQ(c.pause_step(), run.status.pause_step());
    EXPECT_EQ(c.placement().chunks(1).shard(), 1u);
  }
  EXPECT_THAT(run.phases, ::testing::ElementsAre("pausing", "copying", "done"));
}

// A shard back without what it prepared (no checkpoints) cannot commit:
// the move ends "failed" at once, naming it, not after the deadline.
TEST(ResharderTest, AShardBackWithoutItsPreparedStateFailsTheMoveAtOnce) {
  FakeShards shards({3, 3});
  shards.set_dead_commits(1, 2);
  shards.set_lost_prepare(1);
  const absl::Time start = absl::Now();
  Moved run = Move(shards, absl::Seconds(600));
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));
  EXPECT_THAT(run.status.phase(),
              ::testing::StartsWith("failed: shard 1 COMMIT: has no prepared"));
  EXPECT_EQ(run.status.reached_s(), 0);
  EXPECT_TRUE(shards.Calls("ABORT").empty());  // committed: never aborted
}

// A shard that never comes back: "failed" past the commit deadline, naming
// it; the live shard committed once, and nothing is aborted.
TEST(ResharderTest, AShardGoneForGoodFailsTheMoveAtTheDeadline) {
  FakeShards shards({3, 3});
  shards.set_dead_commits(0, 1 << 30);
  Moved run = Move(shards, absl::Milliseconds(50));
  EXPECT_THAT(run.status.phase(),
              ::testing::StartsWith("failed: shards 0 did not answer the "
                                    "COMMIT of placement epoch 1 within 50ms"));
  EXPECT_THAT(run.status.phase(), HasSubstr("connection refused"));
  EXPECT_EQ(shards.Calls("COMMIT 1").size(), 1u);
  EXPECT_TRUE(shards.Calls("ABORT").empty());
}

}  // namespace
}  // namespace ps
