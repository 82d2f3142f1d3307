#include "worker/data/loader.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/dataset.h"
#include "worker/data/shard.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

constexpr uint32_t kBatch = 16;

// 8 features per example, every feature = the example's index, so a batch
// shows which examples it holds.
std::shared_ptr<const Dataset> IndexDataset(size_t n) {
  std::vector<float> x(n * 8);
  std::vector<int32_t> y(n);
  for (size_t i = 0; i < n; ++i) {
    std::fill(x.begin() + i * 8, x.begin() + (i + 1) * 8, float(i));
    y[i] = i % 10;
  }
  return std::make_shared<const Dataset>(
      *Dataset::FromFeatures(std::move(x), std::move(y), 8, 10));
}

ShardPlan Plan(size_t n, uint32_t rank, uint32_t workers, uint64_t seed) {
  return *ShardPlan::Create(n, rank, workers, kBatch, seed);
}

absl::Time Soon() { return absl::Now() + absl::Seconds(30); }

// Pops every remaining batch; returns their example indices in order.
std::vector<std::vector<uint32_t>> Drain(BatchLoader* loader,
                                         const Dataset& data) {
  std::vector<std::vector<uint32_t>> out;
  for (;;) {
    absl::StatusOr<std::unique_ptr<Batch>> b = loader->Pop(Soon());
    if (absl::IsOutOfRange(b.status())) break;
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok()) break;
    EXPECT_EQ((*b)->size, kBatch);
    for (size_t k = 0; k < kBatch; ++k) {
      EXPECT_EQ((*b)->x[k * 8], float((*b)->indices[k]));
      EXPECT_EQ((*b)->labels[k], data.label((*b)->indices[k]));
    }
    out.push_back((*b)->indices);
    loader->Recycle(*std::move(b));
  }
  return out;
}

TEST(BatchLoaderTest, OrderIsDeterministicWhateverTheThreadCount) {
  auto data = IndexDataset(1000);
  const uint64_t spe = Plan(1000, 1, 2, 5).steps_per_epoch();  // 31
  std::vector<std::vector<uint32_t>> runs[3];
  const size_t threads[3] = {1, 3, 4};
  for (int i = 0; i < 3; ++i) {
    BatchLoader::Options options;
    options.num_threads = threads[i];
    options.prefetch = 1 + i * 3;
    auto loader =
        BatchLoader::Create(data, Plan(1000, 1, 2, 5), 0, 3 * spe, options);
    ASSERT_TRUE(loader.ok()) << loader.status();
    runs[i] = Drain(loader->get(), *data);
  }
  ASSERT_EQ(runs[0].size(), 3 * spe);
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_EQ(runs[0], runs[2]);
  // And it is the plan's epoch order, batch after batch.
  const ShardPlan plan = Plan(1000, 1, 2, 5);
  std::vector<uint32_t> order;
  for (uint64_t s = 0; s < 3 * spe; ++s) {
    if (s % spe == 0) plan.EpochOrder(s / spe, &order);
    const auto first = order.begin() + (s % spe) * kBatch;
    EXPECT_EQ(runs[0][s], std::vector<uint32_t>(first, first + kBatch));
  }
}

TEST(BatchLoaderTest, AnEpochVisitsDistinctExamplesOfTheShare) {
  auto data = IndexDataset(1000);
  const ShardPlan plan = Plan(1000, 0, 3, 1);
  const uint64_t spe = plan.steps_per_epoch();  // 333 / 16 = 20
  auto loader = BatchLoader::Create(data, plan, 0, 2 * spe, {});
  ASSERT_TRUE(loader.ok());
  const auto batches = Drain(loader->get(), *data);
  ASSERT_EQ(batches.size(), 2 * spe);
  std::vector<uint32_t> share = plan.share();
  std::sort(share.begin(), share.end());
  for (uint64_t e = 0; e < 2; ++e) {
    std::vector<uint32_t> seen;
    for (uint64_t b = 0; b < spe; ++b) {
      const auto& batch = batches[e * spe + b];
      seen.insert(seen.end(), batch.begin(), batch.end());
    }
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end())
        << "an example repeats in epoch " << e;
    EXPECT_EQ(seen.size(), spe * kBatch);
    EXPECT_TRUE(
        std::includes(share.begin(), share.end(), seen.begin(), seen.end()));
  }
  // All ranks together: every example at most once per epoch, and all but
  // the per-rank remainders visited.
  std::vector<int> visits(1000);
  for (uint32_t r = 0; r < 3; ++r) {
    auto l = BatchLoader::Create(data, Plan(1000, r, 3, 1), 0, spe, {});
    ASSERT_TRUE(l.ok());
    for (const auto& batch : Drain(l->get(), *data)) {
      for (uint32_t i : batch) ++visits[i];
    }
  }
  EXPECT_EQ(std::count(visits.begin(), visits.end(), 1), 3 * spe * kBatch);
  EXPECT_EQ(std::count(visits.begin(), visits.end(), 0),
            1000 - 3 * spe * kBatch);
}

TEST(BatchLoaderTest, StartStepResumesWhereAFullRunWouldBe) {
  auto data = IndexDataset(1000);
  const uint64_t spe = Plan(1000, 0, 1, 3).steps_per_epoch();  // 62
  auto full = BatchLoader::Create(data, Plan(1000, 0, 1, 3), 0, 3 * spe, {});
  const uint64_t start = spe + 5;  // inside the second epoch
  auto resumed =
      BatchLoader::Create(data, Plan(1000, 0, 1, 3), start, 3 * spe, {});
  ASSERT_TRUE(full.ok() && resumed.ok());
  const auto all = Drain(full->get(), *data);
  const auto tail = Drain(resumed->get(), *data);
  ASSERT_EQ(tail.size(), 3 * spe - start);
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), all.begin() + start));
}

TEST(BatchLoaderTest, PrefetchIsBounded) {
  auto data = IndexDataset(2000);
  constexpr size_t kPrefetch = 3;
  // Pops the test has started; producers must never claim a step that is
  // kPrefetch or more ahead of it.
  std::atomic<uint64_t> pops_started{0};
  std::atomic<int> violations{0};
  std::atomic<uint64_t> fills{0};
  BatchLoader::Options options;
  options.num_threads = 4;
  options.prefetch = kPrefetch;
  options.before_fill = [&](uint64_t step) {
    fills.fetch_add(1);
    if (step >= pops_started.load() + kPrefetch) violations.fetch_add(1);
  };
  const ShardPlan plan = Plan(2000, 0, 1, 1);
  const uint64_t steps = 2 * plan.steps_per_epoch();
  auto loader = BatchLoader::Create(data, plan, 0, steps, options);
  ASSERT_TRUE(loader.ok());
  for (uint64_t s = 0; s < steps; ++s) {
    pops_started.fetch_add(1);
    absl::StatusOr<std::unique_ptr<Batch>> b = (*loader)->Pop(Soon());
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ((*b)->step, s);
    const BatchLoader::Stats st = (*loader)->stats();
    EXPECT_LE(st.filled, st.popped + kPrefetch);
    (*loader)->Recycle(*std::move(b));
  }
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(fills.load(), steps);
  // prefetch buffers in flight plus the one the consumer holds.
  EXPECT_LE((*loader)->stats().buffers, kPrefetch + 1);
  EXPECT_TRUE(absl::IsOutOfRange((*loader)->Pop(Soon()).status()));
}

TEST(BatchLoaderTest, PopTimesOutWhileTheBatchIsNotReady) {
  auto data = IndexDataset(500);
  absl::Notification release;
  BatchLoader::Options options;
  options.num_threads = 1;
  options.before_fill = [&](uint64_t) { release.WaitForNotification(); };
  auto loader = BatchLoader::Create(data, Plan(500, 0, 1, 1), 0, 10, options);
  ASSERT_TRUE(loader.ok());
  absl::StatusOr<std::unique_ptr<Batch>> b =
      (*loader)->Pop(absl::Now() + absl::Milliseconds(20));
  EXPECT_EQ(b.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(b.status().message(), HasSubstr("step 0"));
  EXPECT_EQ((*loader)->stats().starved, 1u);
  release.Notify();
  b = (*loader)->Pop(Soon());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->step, 0u);
}

TEST(BatchLoaderTest, CloseWakesABlockedPop) {
  auto data = IndexDataset(500);
  absl::Notification fill_started, release;
  BatchLoader::Options options;
  options.num_threads = 2;
  options.before_fill = [&](uint64_t step) {
    if (step == 0) fill_started.Notify();
    release.WaitForNotification();
  };
  auto loader = BatchLoader::Create(data, Plan(500, 0, 1, 1), 0, 10, options);
  ASSERT_TRUE(loader.ok());
  absl::Status popped;
  std::thread consumer(
      [&] { popped = (*loader)->Pop(absl::InfiniteFuture()).status(); });
  fill_started.WaitForNotification();
  (*loader)->Close();
  consumer.join();
  EXPECT_EQ(popped.code(), absl::StatusCode::kCancelled) << popped;
  EXPECT_EQ((*loader)->Pop(Soon()).status().code(),
            absl::StatusCode::kCancelled);
  release.Notify();  // lets the stalled threads see the close and exit
  loader->reset();   // joins
}

TEST(BatchLoaderTest, DestroyWhileProducersWaitForRoom) {
  // No Pop at all: the threads park on the full window; the destructor must
  // still wake and join them.
  auto data = IndexDataset(500);
  auto loader = BatchLoader::Create(data, Plan(500, 0, 1, 1), 0, 30, {});
  ASSERT_TRUE(loader.ok());
  loader->reset();
}

TEST(BatchLoaderTest, EmptyRangeIsDrainedAtOnce) {
  auto data = IndexDataset(500);
  auto loader = BatchLoader::Create(data, Plan(500, 0, 1, 1), 7, 7, {});
  ASSERT_TRUE(loader.ok());
  EXPECT_TRUE(absl::IsOutOfRange((*loader)->Pop(Soon()).status()));
}

TEST(BatchLoaderTest, RejectsBadOptions) {
  auto data = IndexDataset(500);
  BatchLoader::Options no_threads;
  no_threads.num_threads = 0;
  BatchLoader::Options no_prefetch;
  no_prefetch.prefetch = 0;
  EXPECT_THAT(BatchLoader::Create(data, Plan(500, 0, 1, 1), 0, 1, no_threads)
                  .status()
                  .message(),
              HasSubstr("num_threads"));
  EXPECT_THAT(BatchLoader::Create(data, Plan(500, 0, 1, 1), 0, 1, no_prefetch)
                  .status()
                  .message(),
              HasSubstr("prefetch"));
  EXPECT_THAT(BatchLoader::Create(data, Plan(500, 0, 1, 1), 2, 1, {})
                  .status()
                  .message(),
              HasSubstr("start_step"));
  EXPECT_THAT(
      BatchLoader::Create(IndexDataset(100), Plan(500, 0, 1, 1), 0, 1, {})
          .status()
          .message(),
      HasSubstr("plan"));
  EXPECT_THAT(BatchLoader::Create(nullptr, Plan(500, 0, 1, 1), 0, 1, {})
                  .status()
                  .message(),
              HasSubstr("train"));
}

}  // namespace
}  // namespace ps
