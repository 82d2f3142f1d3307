#include "common/process_tuning.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(ProcessTuningTest, EnablesGrpcReadPathExperimentsWhenUnset) {
  unsetenv("GRPC_EXPERIMENTS");
  EXPECT_TRUE(TuneProcessForThroughput());
  const char* set = std::getenv("GRPC_EXPERIMENTS");
  ASSERT_NE(set, nullptr);
  EXPECT_EQ(std::string(set), kGrpcExperiments);
}

TEST(ProcessTuningTest, KeepsTheUsersGrpcExperiments) {
  setenv("GRPC_EXPERIMENTS", "-tcp_rcv_lowat", 1);
  EXPECT_TRUE(TuneProcessForThroughput());
  EXPECT_EQ(std::string(std::getenv("GRPC_EXPERIMENTS")), "-tcp_rcv_lowat");
}

}  // namespace
}  // namespace ps
