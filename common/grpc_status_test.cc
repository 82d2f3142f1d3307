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

}  // namespace
}  // namespace ps
