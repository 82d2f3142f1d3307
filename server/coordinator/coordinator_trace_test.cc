// JobCoordinator: step timelines (psctl trace). StartTrace stores a window
// for a running job, Heartbeat answers hand it to the job's workers,
// UploadTrace keeps a rank's spans (only from the worker holding the rank)
// and GetTrace reports who uploaded.
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "common/trace_recorder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/testing/coordinator_test_fixture.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TraceWindow Window(const std::string& job_id, uint64_t begin, uint64_t end) {
  TraceWindow w;
  w.set_job_id(job_id);
  w.set_begin_step(begin);
  w.set_end_step(end);
  return w;
}

class CoordinatorTraceTest : public CoordinatorTest {
 protected:
  // Two workers running a 2-worker job; rank_[r] holds rank r.
  void SetUp() override {
    CoordinatorTest::SetUp();
    const std::string a = Register("host-a");
    const std::string b = Register("host-b");
    job_ = Submit(Spec(2));
    for (const std::string& w : {a, b}) {
      std::optional<Assignment> got = Assigned(w);
      ASSERT_TRUE(got.has_value());
      rank_[got->rank()] = w;
    }
    ASSERT_EQ(Job(job_).state(), RUNNING);
  }

  absl::Status Start(const TraceWindow& w, uint64_t* step = nullptr) {
    StartTraceRequest request;
    *request.mutable_window() = w;
    StartTraceResponse response;
    absl::Status s = coord_->StartTrace(request, &response);
    if (step != nullptr) *step = response.step();
    return s;
  }
  absl::Status Upload(const std::string& worker_id, uint32_t rank,
                      const TraceWindow& w, int spans) {
    UploadTraceRequest request;
    request.set_worker_id(worker_id);
    request.set_rank(rank);
    *request.mutable_window() = w;
    request.set_name("worker" + std::to_string(rank));
    for (int i = 0; i < spans; ++i) {
      TraceSpan* s = request.add_spans();
      s->set_kind(TRACE_STEP);
      s->set_step(w.begin_step() + static_cast<uint64_t>(i));
    }
    return coord_->UploadTrace(request);
  }
  GetTraceResponse Get(std::optional<uint32_t> rank = std::nullopt) {
    GetTraceRequest request;
    request.set_job_id(job_);
    if (rank.has_value()) request.set_rank(*rank);
    GetTraceResponse response;
    EXPECT_TRUE(coord_->GetTrace(request, &response).ok());
    return response;
  }

  std::string job_;
  std::string rank_[2];
};

TEST_F(CoordinatorTraceTest, StartAnswersTheJobsStepAndHeartbeatsCarryIt) {
  Report(rank_[0], job_, 0, 40);
  uint64_t step = 0;
  ASSERT_TRUE(Start(Window(job_, 100, 120), &step).ok());
  EXPECT_EQ(step, 40u);
  for (const std::string& w : rank_) {
    HeartbeatResponse beat = Beat(w);
    ASSERT_TRUE(beat.has_trace()) << w;
    EXPECT_EQ(beat.trace().job_id(), job_);
    EXPECT_EQ(beat.trace().begin_step(), 100u);
    EXPECT_EQ(beat.trace().end_step(), 120u);
  }
  // A worker of no job gets no window.
  EXPECT_FALSE(Beat(Register("host-c")).has_trace());
}

TEST_F(CoordinatorTraceTest, StartRefusesUnknownEndedJobsAndBadRanges) {
  absl::Status unknown = Start(Window("job-999999", 0, 10));
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  absl::Status empty = Start(Window(job_, 10, 10));
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.message(), HasSubstr("window"));
  EXPECT_EQ(Start(Window(job_, 0, kTraceMaxSteps + 1)).code(),
            absl::StatusCode::kInvalidArgument);
  // Nothing was stored by the refusals.
  EXPECT_FALSE(Beat(rank_[0]).has_trace());
  EXPECT_FALSE(Get().has_window());

  Report(rank_[0], job_, 0, 10, /*finished=*/true);
  Report(rank_[1], job_, 1, 10, /*finished=*/true);
  ASSERT_EQ(Job(job_).state(), SUCCEEDED);
  absl::Status ended = Start(Window(job_, 20, 30));
  EXPECT_EQ(ended.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(ended.message(), HasSubstr("already ended"));
}

TEST_F(CoordinatorTraceTest, UploadsAreKeptByRankAndFetchedOneAtATime) {
  const TraceWindow w = Window(job_, 100, 120);
  ASSERT_TRUE(Start(w).ok());
  GetTraceResponse none = Get();
  EXPECT_EQ(none.num_workers(), 2u);
  EXPECT_EQ(none.uploaded_ranks_size(), 0);
  EXPECT_EQ(none.window().begin_step(), 100u);

  ASSERT_TRUE(Upload(rank_[1], 1, w, 20).ok());
  GetTraceResponse one = Get();
  EXPECT_THAT(one.uploaded_ranks(), ElementsAre(1u));
  EXPECT_FALSE(one.has_worker());  // no rank asked: the list only
  GetTraceResponse spans = Get(1);
  EXPECT_EQ(spans.worker().name(), "worker1");
  EXPECT_EQ(spans.worker().spans_size(), 20);
  EXPECT_EQ(spans.worker().spans(19).step(), 119u);

  ASSERT_TRUE(Upload(rank_[0], 0, w, 20).ok());
  EXPECT_THAT(Get().uploaded_ranks(), ElementsAre(0u, 1u));
}

TEST_F(CoordinatorTraceTest, UploadFromAWorkerNotHoldingTheRankIsRefused) {
  const TraceWindow w = Window(job_, 100, 120);
  ASSERT_TRUE(Start(w).ok());
  absl::Status wrong = Upload(rank_[0], 1, w, 5);
  EXPECT_EQ(wrong.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(wrong.message(), HasSubstr("worker_id"));
  EXPECT_EQ(Upload(rank_[0], 2, w, 5).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Upload("w-999", 0, w, 5).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Upload(rank_[0], 0, Window("job-999999", 100, 120), 5).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Get().uploaded_ranks_size(), 0);
}

TEST_F(CoordinatorTraceTest, ANewWindowDropsUploadsAndRefusesLateOnes) {
  const TraceWindow first = Window(job_, 100, 120);
  ASSERT_TRUE(Start(first).ok());
  ASSERT_TRUE(Upload(rank_[0], 0, first, 3).ok());
  const TraceWindow second = Window(job_, 500, 510);
  ASSERT_TRUE(Start(second).ok());
  EXPECT_EQ(Get().uploaded_ranks_size(), 0);
  EXPECT_EQ(Beat(rank_[1]).trace().begin_step(), 500u);
  // rank 1 finishing the first window late: refused, not mixed in.
  EXPECT_EQ(Upload(rank_[1], 1, first, 3).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Get().uploaded_ranks_size(), 0);
}

TEST_F(CoordinatorTraceTest, GetTraceOfAnUnknownJobIsNotFound) {
  GetTraceRequest request;
  request.set_job_id("job-999999");
  GetTraceResponse response;
  EXPECT_EQ(coord_->GetTrace(request, &response).code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ps
