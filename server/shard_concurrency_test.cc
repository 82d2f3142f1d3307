// Shard tests. Concurrency: many threads pushing to many chunks.
#include <cstdint>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/shard.h"
#include "server/testing/shard_test_util.h"

namespace ps {
namespace shard_test {
namespace {

// 8 threads push to 62 chunks in different orders. Every update subtracts
// the same lr * 1.0, so the result is exact whatever the interleaving.
TEST(ShardConcurrencyTest, EightThreadsAspManyChunks) {
  constexpr uint32_t kThreads = 8;
  constexpr int kSteps = 40;
  Shard shard(ShardOptions{});
  JobSpec spec = Spec(ASP, kThreads);
  spec.mutable_optimizer()->clear_momentum();
  spec.mutable_optimizer()->set_learning_rate(0.125f);
  spec.set_partition_bytes(4 * 5);  // 310 floats -> 62 chunks
  const RegisterJobRequest reg = Registration("j", spec);
  RegisterJobResponse resp;
  ASSERT_TRUE(shard.RegisterJob(reg, &resp).ok());
  const int chunks = reg.placement().chunks_size();
  ASSERT_EQ(chunks, 62);
  std::vector<std::vector<float>> start = Params(shard, "j");

  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (uint32_t w = 0; w < kThreads; ++w) {
    threads.emplace_back([&, w] {
      for (int t = 0; t < kSteps; ++t) {
        PushPullRequest req;
        req.set_job_id("j");
        req.set_worker(w);
        req.set_step(t);
        for (int i = 0; i < chunks; ++i) {
          const uint32_t c = (i * 7 + w * 13 + t) % chunks;  // varied order
          ChunkData* g = req.add_gradients();
          g->set_chunk_id(c);
          g->set_data(Bytes(std::vector<float>(ChunkLength(reg, c), 1.0f)));
        }
        PushPullResponse r;
        absl::Notification n;
        absl::Status st;
        shard.PushPull(req, &r, [&](absl::Status s) {
          st = s;
          n.Notify();
        });
        n.WaitForNotification();
        if (!st.ok() || r.parameters_size() != chunks) ++failures;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);

  const std::vector<std::vector<float>> end = Params(shard, "j");
  for (int c = 0; c < chunks; ++c) {
    for (size_t i = 0; i < end[c].size(); ++i) {
      float want = start[c][i];
      for (uint32_t k = 0; k < kThreads * kSteps; ++k)
        want = want - 0.125f * 1.0f;
      ASSERT_EQ(end[c][i], want) << "chunk " << c << " element " << i;
    }
  }
  const JobStats s = StatsOf(shard, "j");
  EXPECT_EQ(s.version(), uint64_t{kThreads} * kSteps);
  EXPECT_EQ(s.pushes(), uint64_t{kThreads} * kSteps * chunks);
  EXPECT_EQ(s.duplicates(), 0u);
}

// 8 BSP workers on their own threads, each waiting for its reply before the
// next step: the result equals the single-threaded, in-order run bit for bit.
TEST(ShardConcurrencyTest, EightThreadsBspMatchesSequential) {
  constexpr uint32_t kWorkers = 8;
  constexpr int kSteps = 10;
  JobSpec spec = Spec(BSP, kWorkers);
  spec.set_partition_bytes(4 * 16);  // 20 chunks
  const RegisterJobRequest reg = Registration("j", spec);
  std::vector<uint32_t> all(reg.placement().chunks_size());
  std::iota(all.begin(), all.end(), 0);

  const std::vector<std::vector<float>> sequential =
      SequentialBspParams(reg, kWorkers, kSteps);
  RegisterJobResponse resp;

  Shard threaded(ShardOptions{});
  ASSERT_TRUE(threaded.RegisterJob(reg, &resp).ok());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (uint32_t w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      for (int t = 0; t < kSteps; ++t) {
        std::vector<uint32_t> order = all;
        std::rotate(order.begin(), order.begin() + (w * 3 + t) % order.size(),
                    order.end());
        const PushPullRequest req =
            PushRequestFor<PushPullRequest>(reg, w, t, order, t);
        PushPullResponse r;
        absl::Notification n;
        absl::Status st;
        threaded.PushPull(req, &r, [&](absl::Status s) {
          st = s;
          n.Notify();
        });
        n.WaitForNotification();
        if (!st.ok()) ++failures;
        for (const ChunkData& d : r.parameters()) {
          if (d.version() != static_cast<uint64_t>(t + 1)) ++failures;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(Params(threaded, "j"), sequential);
  EXPECT_EQ(threaded.PendingWaits(), 0u);
}

}  // namespace
}  // namespace shard_test
}  // namespace ps
