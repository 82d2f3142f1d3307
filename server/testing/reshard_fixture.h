// The live re-placement tests' fixture (server/shard_reshard*_test.cc):
// in-process shards whose PREPAREs fetch chunks from each other directly
// (addresses "s0", "s1", ...), Reshard requests, and BSP steps of a job
// under a given placement.
//
//   ShardGroup group(2);
//   ASSERT_TRUE(group.RegisterAll(reg).ok());
//   group.Step(reg, reg.placement(), /*step=*/0);
//   ASSERT_TRUE(group.OnEvery(Phase("j", 1, ReshardRequest::PAUSE, 1)).ok());
#ifndef SERVER_TESTING_RESHARD_FIXTURE_H_
#define SERVER_TESTING_RESHARD_FIXTURE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace shard_test {

inline constexpr absl::Duration kReshardWait = absl::Seconds(30);

inline ReshardRequest Phase(const std::string& job, uint64_t epoch,
                            ReshardRequest::Phase phase,
                            uint64_t pause_step = 0) {
  ReshardRequest r;
  r.set_job_id(job);
  r.set_epoch(epoch);
  r.set_phase(phase);
  r.set_pause_step(pause_step);
  return r;
}

// `from` at `epoch`, with chunk i on shard place(i).
inline Placement Replaced(const Placement& from, uint64_t epoch,
                          const std::function<uint32_t(uint32_t)>& place) {
  Placement p = from;
  p.set_epoch(epoch);
  for (ChunkPlacement& c : *p.mutable_chunks())
    c.set_shard(place(c.chunk_id()));
  return p;
}

// A PushPull of `worker` for `step` on `chunks`, at placement `epoch`.
inline std::unique_ptr<PushPullCall> StartPush(
    Shard& shard, const RegisterJobRequest& reg, uint32_t worker, uint64_t step,
    const std::vector<uint32_t>& chunks, uint64_t epoch) {
  PushPullRequest req =
      PushRequestFor<PushPullRequest>(reg, worker, step, chunks, step);
  req.set_placement_epoch(epoch);
  return StartPushPull(shard, req);
}

class ShardGroup {
 public:
  // `n` shards, ids 0 .. n - 1, `options` applied to each (shard_id set).
  explicit ShardGroup(uint32_t n, ShardOptions options = ShardOptions{}) {
    for (uint32_t i = 0; i < n; ++i) {
      options.shard_id = i;
      shards_.push_back(std::make_unique<Shard>(options));
    }
    for (auto& s : shards_) Wire(*s);
  }

  static std::string Address(uint32_t i) { return absl::StrCat("s", i); }
  Shard& shard(uint32_t i) { return *shards_[i]; }
  uint32_t size() const { return static_cast<uint32_t>(shards_.size()); }
  // FetchChunks calls so far.
  int fetches() const { return fetches_.load(); }
  // Replaces shard i (a restart), with the fetcher still wired.
  void Replace(uint32_t i, std::unique_ptr<Shard> s) {
    shards_[i] = std::move(s);
    Wire(*shards_[i]);
  }

  absl::Status RegisterAll(const RegisterJobRequest& reg) {
    for (auto& s : shards_) {
      RegisterJobResponse resp;
      if (absl::Status st = s->RegisterJob(reg, &resp); !st.ok()) return st;
    }
    return absl::OkStatus();
  }

  // `req` on every shard (PREPARE: with every shard's address); the first
  // error. `resp` (when given) gets every shard's answer.
  absl::Status OnEvery(ReshardRequest req,
                       std::vector<ReshardResponse>* resp = nullptr) {
    if (req.phase() == ReshardRequest::PREPARE) {
      for (uint32_t i = 0; i < size(); ++i) req.add_shard_addresses(Address(i));
    }
    std::vector<ReshardResponse> answers(size());
    absl::Status first;
    for (uint32_t i = 0; i < size(); ++i) {
      absl::Status st = shards_[i]->Reshard(req, &answers[i]);
      if (first.ok() && !st.ok()) first = st;
    }
    if (resp != nullptr) *resp = answers;
    return first;
  }

  // Each of the job's workers pushes `step` to every shard that `placement`
  // gives chunks, at its epoch; every answer arrives at version step + 1.
  void Step(const RegisterJobRequest& reg, const Placement& placement,
            uint64_t step) {
    std::vector<std::unique_ptr<PushPullCall>> calls;
    for (uint32_t w = 0; w < reg.num_workers(); ++w) {
      for (uint32_t i = 0; i < size(); ++i) {
        const std::vector<uint32_t> chunks = ChunksOf(placement, i);
        if (chunks.empty()) continue;
        calls.push_back(
            StartPush(*shards_[i], reg, w, step, chunks, placement.epoch()));
      }
    }
    for (auto& c : calls) {
      ASSERT_TRUE(c->done.WaitForNotificationWithTimeout(kReshardWait));
      ASSERT_TRUE(c->status.ok()) << c->status;
      for (const ChunkData& d : c->resp.parameters()) {
        ASSERT_EQ(d.version(), step + 1);
      }
    }
  }

  // The job's parameters by chunk id, each read from its shard under
  // `placement`.
  std::vector<std::vector<float>> Params(const std::string& job,
                                         const Placement& placement) {
    std::vector<std::vector<float>> out(placement.chunks_size());
    for (const ChunkPlacement& c : placement.chunks()) {
      PullRequest req;
      req.set_job_id(job);
      req.set_placement_epoch(placement.epoch());
      req.add_chunk_ids(c.chunk_id());
      PullCall call;
      shards_[c.shard()]->Pull(req, &call.resp, call.Callback());
      EXPECT_TRUE(call.done.HasBeenNotified());
      EXPECT_TRUE(call.status.ok()) << call.status;
      if (call.resp.parameters_size() == 1) {
        out[c.chunk_id()] = Floats(call.resp.parameters(0).data());
      }
    }
    return out;
  }

  static std::vector<uint32_t> ChunksOf(const Placement& p, uint32_t shard) {
    std::vector<uint32_t> ids;
    for (const ChunkPlacement& c : p.chunks()) {
      if (c.shard() == shard) ids.push_back(c.chunk_id());
    }
    return ids;
  }

 private:
  // `s` fetches from the group's shards by address, directly.
  void Wire(Shard& s) {
    s.SetChunkFetcher([this](const std::string& address,
                             const FetchChunksRequest& req, absl::Time,
                             FetchChunksResponse* resp) {
      fetches_.fetch_add(1);
      for (uint32_t i = 0; i < shards_.size(); ++i) {
        if (address == Address(i)) return shards_[i]->FetchChunks(req, resp);
      }
      return absl::UnavailableError(absl::StrCat("no shard at ", address));
    });
  }

  std::vector<std::unique_ptr<Shard>> shards_;
  std::atomic<int> fetches_{0};
};

}  // namespace shard_test
}  // namespace ps

#endif  // SERVER_TESTING_RESHARD_FIXTURE_H_
