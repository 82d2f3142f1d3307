// Several threads pushing, pulling, saving and evicting at once; the sums
// must come out exact.
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/sparse/byte_stream.h"
#include "server/sparse/sparse_table.h"
#include "server/sparse/testing/sparse_table_test_util.h"

namespace ps {
namespace {

using sparse_test::MustCreate;

constexpr int kPushers = 4;
constexpr int kPushesPerThread = 300;
constexpr uint64_t kShared = 64;   // ids 0..63 pushed by every thread
constexpr uint64_t kPrivate = 50;  // per thread, per push, fresh ids

// row += grad (integers, so every order gives the exact same sum);
// state[0] counts updates.
void AddUpdate(float* row, float* state, const float* grad, uint64_t) {
  for (int e = 0; e < 4; ++e) row[e] += grad[e];
  state[0] += 1;
}

TEST(SparseTableConcurrencyTest, ConcurrentPushesSumExactly) {
  SparseTable::Options o = sparse_test::SmallOptions();
  o.init = {};  // zeros
  o.num_stripes = 8;
  auto t = MustCreate(o);
  absl::Notification start;
  std::vector<std::thread> threads;
  for (int w = 0; w < kPushers; ++w) {
    threads.emplace_back([&, w] {
      start.WaitForNotification();
      std::vector<uint64_t> ids;
      for (int p = 0; p < kPushesPerThread; ++p) {
        ids.clear();
        for (uint64_t k = 0; k < kShared; ++k) ids.push_back(k);
        ids.push_back(0);  // a duplicate: 2 on id 0 per push
        for (uint64_t k = 0; k < kPrivate; ++k) {
          ids.push_back(1000000 +
                        (uint64_t(w) * kPushesPerThread + p) * kPrivate + k);
        }
        std::vector<float> grads(ids.size() * 4, 1.0f);
        ASSERT_TRUE(t->Push(ids, grads, p, AddUpdate).ok());
      }
    });
  }
  // Readers: shared rows only ever grow, in whole steps.
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&] {
      start.WaitForNotification();
      std::vector<uint64_t> ids;
      for (uint64_t k = 0; k < kShared; ++k) ids.push_back(k);
      std::vector<float> last(ids.size() * 4, 0.0f), out(ids.size() * 4);
      for (int i = 0; i < 200; ++i) {
        ASSERT_TRUE(t->Pull(ids, absl::MakeSpan(out)).ok());
        for (size_t k = 0; k < out.size(); ++k) ASSERT_GE(out[k], last[k]);
        last = out;
      }
    });
  }
  // A saver and an evictor that never evicts (ttl far away).
  threads.emplace_back([&] {
    start.WaitForNotification();
    for (int i = 0; i < 5; ++i) {
      std::string bytes;
      StringSink sink(&bytes);
      ASSERT_TRUE(t->Save(sink).ok());
      auto copy = MustCreate(o);
      StringSource src(bytes);
      ASSERT_TRUE(copy->Restore(src).ok());
      t->EvictExpired(0);
      (void)t->GetStats();
    }
  });
  start.Notify();
  for (std::thread& th : threads) th.join();

  std::vector<uint64_t> ids;
  for (uint64_t k = 0; k < kShared; ++k) ids.push_back(k);
  std::vector<float> out(ids.size() * 4);
  ASSERT_TRUE(t->Pull(ids, absl::MakeSpan(out)).ok());
  const float pushes = kPushers * kPushesPerThread;
  for (uint64_t k = 0; k < kShared; ++k) {
    for (int e = 0; e < 4; ++e) {
      ASSERT_EQ(out[k * 4 + e], k == 0 ? 2 * pushes : pushes) << "id " << k;
    }
  }
  const SparseTable::Stats st = t->GetStats();
  EXPECT_EQ(st.rows, kShared + kPushers * kPushesPerThread * kPrivate);
  EXPECT_EQ(st.rows_pushed, kPushers * kPushesPerThread * (kShared + kPrivate));
  EXPECT_EQ(st.rows_pulled, 2u * 200 * kShared + kShared);
}

}  // namespace
}  // namespace ps
