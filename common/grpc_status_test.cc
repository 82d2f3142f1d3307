#include "common/grpc_status.h"

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(GrpcStatusTest, RoundTripsEveryCode) {
  for (int code = 0; code <= 16; ++code) {
    absl::Status in(static_cast<absl::StatusCode>(code),
                    code == 0 ? "" : "field x: bad");
    grpc::Status g = ToGrpcStatus(in);
    EXPECT_EQ(static_cast<int>(g.error_code()), code);
    EXPECT_EQ(FromGrpcStatus(g), in) << code;
  }
}

TEST(GrpcStatusTest, KeepsMessage) {
  grpc::Status g =
      ToGrpcStatus(absl::InvalidArgumentError("gradients[0]: NaN"));
  EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(g.error_message(), "gradients[0]: NaN");
}

TEST(GrpcStatusTest, CarriesTheNotRetryableMark) {
  const absl::Status answer =
      NotRetryable(absl::UnavailableError("job store /s/jobs.sqlite: locked"));
  EXPECT_TRUE(IsNotRetryable(answer));
  EXPECT_FALSE(IsNotRetryable(absl::UnavailableError("connection refused")));
  const absl::Status back = FromGrpcStatus(ToGrpcStatus(answer));
  EXPECT_TRUE(IsNotRetryable(back));
  EXPECT_EQ(back.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(back.message(), answer.message());
  EXPECT_FALSE(IsNotRetryable(FromGrpcStatus(
      grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection refused"))));
}

TEST(GrpcStatusTest, CarriesThePausedForReplacementMark) {
  const absl::Status paused = PausedForReplacement(
      absl::UnavailableError("job j pauses at step 2 for a re-placement"));
  EXPECT_TRUE(IsPausedForReplacement(paused));
  EXPECT_FALSE(IsNotRetryable(paused));
  const absl::Status back = FromGrpcStatus(ToGrpcStatus(paused));
  EXPECT_TRUE(IsPausedForReplacement(back));
  EXPECT_FALSE(IsNotRetryable(back));
  EXPECT_EQ(back.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(back.message(), paused.message());
  EXPECT_FALSE(IsPausedForReplacement(
      FromGrpcStatus(ToGrpcStatus(absl::UnavailableError("busy")))));
}

}  // namespace
}  // namespace ps
