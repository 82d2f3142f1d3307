#include "worker/client/request_handle.h"

#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(RequestTrackerTest, WaitReturnsTheStatusOnceThenForgets) {
  RequestTracker tracker;
  RequestHandle h = tracker.Open("step 1");
  EXPECT_NE(h.id(), 0u);
  tracker.Close(h, absl::UnavailableError("shard 0"));
  EXPECT_EQ(tracker.Wait(h, absl::InfiniteFuture()).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(tracker.Wait(h, absl::InfiniteFuture()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RequestTrackerTest, DeadlineFirstLeavesTheRequestRunning) {
  RequestTracker tracker;
  RequestHandle h = tracker.Open("step 2");
  absl::Status first = tracker.Wait(h, absl::Now() + absl::Milliseconds(10));
  EXPECT_EQ(first.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(first.message().find("step 2"), absl::string_view::npos);
  std::thread closer([&] { tracker.Close(h, absl::OkStatus()); });
  EXPECT_TRUE(tracker.Wait(h, absl::InfiniteFuture()).ok());
  closer.join();
}

TEST(RequestTrackerTest, DetachedHandlesCannotBeWaited) {
  RequestTracker tracker;
  RequestHandle running = tracker.Open("a");
  RequestHandle over = tracker.Open("b");
  EXPECT_NE(running.id(), over.id());
  tracker.Close(over, absl::OkStatus());
  tracker.Detach(running);
  tracker.Detach(over);
  tracker.Close(running, absl::OkStatus());
  EXPECT_EQ(tracker.Wait(running, absl::InfiniteFuture()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tracker.Wait(over, absl::InfiniteFuture()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tracker.Wait(RequestHandle(), absl::InfiniteFuture()).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
