// The replicated shard tests' fixture (server/shard_replication_test.cc,
// server/shard_replication_asp_test.cc): a job with replication 2 on two
// in-process shards whose forwards call each other directly, through a
// sender the test can hold, slow down or watch for refusals.
#ifndef SERVER_TESTING_REPLICATION_FIXTURE_H_
#define SERVER_TESTING_REPLICATION_FIXTURE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace shard_test {

inline constexpr absl::Duration kWait = absl::Seconds(30);

inline JobSpec ReplicatedSpec(ConsistencyMode mode = BSP) {
  JobSpec spec = Spec(mode, 2);
  spec.mutable_optimizer()->set_momentum(0.9f);
  spec.set_replication(2);
  return spec;
}

// Chunk i on shard i % 2, its backup on the other.
inline RegisterJobRequest ReplicatedRegistration(ConsistencyMode mode = BSP) {
  return ReplicatedOnTwo("j", ReplicatedSpec(mode));
}

class ShardReplicationTest : public ::testing::Test {
 protected:
  virtual ConsistencyMode Mode() const { return BSP; }

  void SetUp() override {
    reg_ = ReplicatedRegistration(Mode());
    for (uint32_t s = 0; s < 2; ++s) {
      ShardOptions o = Options(s);
      o.replicate_retry = absl::Milliseconds(5);
      shards_.push_back(std::make_unique<Shard>(o));
      shards_[s]->SetReplicaSender([this](const std::string& address,
                                          const ReplicateRequest& req,
                                          absl::Time deadline) {
        bool held_chunk = false;
        {
          absl::MutexLock l(&fenced_mu_);
          if (hold_) return absl::UnavailableError("held by the test");
          if (needs_ > absl::ZeroDuration()) {
            // A backup that takes a forward only given `needs_`: a try
            // with less runs out of time (at once, here).
            offered_.push_back(deadline - absl::Now());
            if (offered_.back() < needs_) {
              return absl::DeadlineExceededError("the test's slow backup");
            }
          }
          for (const ReplicaChunk& c : req.chunks()) {
            held_chunk = held_chunk || c.chunk_id() == held_chunk_;
            ++(c.gradient().empty() ? state_chunks_ : gradient_chunks_);
            if (!c.gradient().empty() && refuse_gradients_ > 0) {
              --refuse_gradients_;  // as a backup lacking the base would
              return absl::OutOfRangeError("the test's backup lacks the base");
            }
          }
          if (held_chunk && !chunk_held_.HasBeenNotified()) {
            chunk_held_.Notify();
          }
        }
        if (held_chunk) release_.WaitForNotificationWithTimeout(kWait);
        absl::Status st = shards_[address == "s0" ? 0 : 1]->Replicate(req);
        absl::MutexLock l(&fenced_mu_);
        if ((absl::IsFailedPrecondition(st) || absl::IsAborted(st)) &&
            !fenced_.HasBeenNotified()) {
          fenced_status_ = st;
          fenced_.Notify();
        }
        return st;
      });
      SetReplicaViewResponse resp;
      ASSERT_TRUE(shards_[s]->SetReplicaView(View(1, {}), &resp).ok());
      RegisterJobResponse reg;
      ASSERT_TRUE(shards_[s]->RegisterJob(reg_, &reg).ok());
      EXPECT_EQ(reg.chunks_held(), 4u);  // 2 primaries, 2 backups
    }
  }
  void TearDown() override {
    Release();
    shards_[0].reset();  // its forwards call shard 1
    shards_[1].reset();
  }

  // Both workers push `step`: to each shard of `to` its chunks, the whole
  // step on the wire before any answer (as the client does for a job whose
  // answers wait); every answer arrives.
  void Step(uint64_t step,
            std::vector<std::pair<uint32_t, std::vector<uint32_t>>> to) {
    std::vector<std::unique_ptr<PushPullCall>> calls;
    for (const auto& [shard, chunks] : to) {
      for (uint32_t w = 0; w < 2; ++w) {
        calls.push_back(StartPushPull(
            *shards_[shard],
            PushRequestFor<PushPullRequest>(reg_, w, step, chunks, step)));
      }
    }
    for (auto& call : calls) {
      ASSERT_TRUE(call->done.WaitForNotificationWithTimeout(kWait));
      ASSERT_TRUE(call->status.ok()) << call->status;
      for (const ChunkData& d : call->resp.parameters()) {
        EXPECT_EQ(d.version(), step + 1);
      }
    }
  }

  void Hold(bool hold) {
    absl::MutexLock l(&fenced_mu_);
    hold_ = hold;
  }

  // Forwards holding chunk `chunk` wait (in flight) until Release.
  void HoldChunk(uint32_t chunk) {
    absl::MutexLock l(&fenced_mu_);
    held_chunk_ = chunk;
  }
  void Release() {
    if (!release_.HasBeenNotified()) release_.Notify();
  }

  RegisterJobRequest reg_;
  std::vector<std::unique_ptr<Shard>> shards_;
  absl::Notification chunk_held_;  // a forward of held_chunk_ is in flight
  absl::Notification release_;
  absl::Mutex fenced_mu_;  // the first refused forward, noted once
  absl::Notification fenced_;
  absl::Status fenced_status_;
  bool hold_ ABSL_GUARDED_BY(fenced_mu_) = false;  // forwards fail
  // Forwards given less time than this run out of time; the time each
  // forward was given.
  absl::Duration needs_ ABSL_GUARDED_BY(fenced_mu_) = absl::ZeroDuration();
  std::vector<absl::Duration> offered_ ABSL_GUARDED_BY(fenced_mu_);
  uint32_t held_chunk_ ABSL_GUARDED_BY(fenced_mu_) = UINT32_MAX;
  // Chunks forwarded as their state, and as a step's gradient.
  int state_chunks_ ABSL_GUARDED_BY(fenced_mu_) = 0;
  int gradient_chunks_ ABSL_GUARDED_BY(fenced_mu_) = 0;
  // Forwards holding a gradient still to refuse as lacking their base.
  int refuse_gradients_ ABSL_GUARDED_BY(fenced_mu_) = 0;
};

// The same steps on one shard without replicas.
inline std::vector<std::vector<float>> Reference(uint64_t steps) {
  JobSpec spec = ReplicatedSpec();
  spec.clear_replication();
  const RegisterJobRequest reg = Registration("j", spec, 1);
  Shard shard(ShardOptions{});
  RegisterJobResponse resp;
  EXPECT_TRUE(shard.RegisterJob(reg, &resp).ok());
  for (uint64_t t = 0; t < steps; ++t) BspStep(shard, reg, t);
  return Params(shard, "j");
}

class ShardReplicationAspTest : public ShardReplicationTest {
 protected:
  ConsistencyMode Mode() const override { return ASP; }
};

}  // namespace shard_test
}  // namespace ps

#endif  // SERVER_TESTING_REPLICATION_FIXTURE_H_
