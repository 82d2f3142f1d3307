#include "server/coordinator/trace_store.h"

#include "common/trace_recorder.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

TraceWindow Window(uint64_t begin, uint64_t end) {
  TraceWindow w;
  w.set_job_id("job-000001");
  w.set_begin_step(begin);
  w.set_end_step(end);
  return w;
}

UploadTraceRequest Upload(const TraceWindow& w, uint32_t rank, int spans) {
  UploadTraceRequest u;
  *u.mutable_window() = w;
  u.set_rank(rank);
  u.set_name("worker" + std::to_string(rank));
  for (int i = 0; i < spans; ++i) u.add_spans()->set_step(w.begin_step());
  return u;
}

TEST(TraceStoreTest, RejectsEmptyAndLongWindows) {
  TraceStore store;
  EXPECT_EQ(store.Start(Window(5, 5)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Start(Window(6, 5)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Start(Window(0, kTraceMaxSteps + 1)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Window("job-000001"), nullptr);  // nothing stored
  EXPECT_TRUE(store.Start(Window(0, kTraceMaxSteps)).ok());
}

TEST(TraceStoreTest, KeepsUploadsOfTheCurrentWindowByRank) {
  TraceStore store;
  ASSERT_TRUE(store.Start(Window(10, 20)).ok());
  ASSERT_TRUE(store.Upload(Upload(Window(10, 20), 1, 3), 2).ok());
  GetTraceResponse got;
  store.Get("job-000001", 1, &got);
  EXPECT_EQ(got.window().begin_step(), 10u);
  ASSERT_EQ(got.uploaded_ranks_size(), 1);
  EXPECT_EQ(got.uploaded_ranks(0), 1u);
  EXPECT_EQ(got.worker().spans_size(), 3);
  EXPECT_EQ(got.worker().name(), "worker1");

  GetTraceResponse other;
  store.Get("job-000001", 0, &other);  // rank 0 did not upload
  EXPECT_FALSE(other.has_worker());
}

TEST(TraceStoreTest, RefusesStaleWindowsBadRanksAndTooManySpans) {
  TraceStore store;
  ASSERT_TRUE(store.Start(Window(10, 20)).ok());
  EXPECT_EQ(store.Upload(Upload(Window(0, 5), 0, 1), 2).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store.Upload(Upload(Window(10, 20), 2, 1), 2).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      store.Upload(Upload(Window(10, 20), 0, kTraceMaxSpans + 1), 2).code(),
      absl::StatusCode::kInvalidArgument);
  GetTraceResponse got;
  store.Get("job-000001", 0, &got);
  EXPECT_EQ(got.uploaded_ranks_size(), 0);
}

TEST(TraceStoreTest, NewWindowDropsOldUploads) {
  TraceStore store;
  ASSERT_TRUE(store.Start(Window(10, 20)).ok());
  ASSERT_TRUE(store.Upload(Upload(Window(10, 20), 0, 1), 1).ok());
  ASSERT_TRUE(store.Start(Window(30, 40)).ok());
  GetTraceResponse got;
  store.Get("job-000001", 0, &got);
  EXPECT_EQ(got.uploaded_ranks_size(), 0);
  EXPECT_EQ(got.window().begin_step(), 30u);
}

}  // namespace
}  // namespace ps
