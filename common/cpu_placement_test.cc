#include "common/cpu_placement.h"

#include <sched.h>

#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CpuPlacementTest, ParsesListsAndRanges) {
  const std::vector<int> allowed = {0, 1, 2, 3, 6};
  EXPECT_THAT(*ParseCpuCores("cpu_cores", "", allowed), ElementsAre());
  EXPECT_THAT(*ParseCpuCores("cpu_cores", "1", allowed), ElementsAre(1));
  EXPECT_THAT(*ParseCpuCores("cpu_cores", "3, 0-1,6,1", allowed),
              ElementsAre(0, 1, 3, 6));
}

TEST(CpuPlacementTest, BadListsNameTheField) {
  const std::vector<int> allowed = {0, 1};
  for (const char* bad : {"a", "1-", "-1", "2-1", "0,,1", "1-2-3", "0x1"}) {
    absl::StatusOr<std::vector<int>> c =
        ParseCpuCores("cpu_cores", bad, allowed);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(c.status().message(), HasSubstr("cpu_cores: \""));
  }
  absl::StatusOr<std::vector<int>> c =
      ParseCpuCores("cpu_cores", "0-2", allowed);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(),
              HasSubstr("core 2 is not available to this process (it may "
                        "use 0,1)"));
}

TEST(CpuPlacementTest, PinsEveryThreadAndLaterOnes) {
  const std::vector<int> allowed = AllowedCores();
  ASSERT_FALSE(allowed.empty());
  const std::vector<int> one = {allowed.back()};
  ASSERT_TRUE(PinProcessToCores({}).ok());
  ASSERT_TRUE(PinProcessToCores(one).ok());
  EXPECT_EQ(AllowedCores(), one);
  std::vector<int> seen;
  std::thread([&] { seen = AllowedCores(); }).join();
  EXPECT_EQ(seen, one);
  ASSERT_TRUE(PinProcessToCores(allowed).ok());  // restore
  EXPECT_EQ(AllowedCores(), allowed);
}

TEST(CpuPlacementTest, KernelNames) {
  for (const char* ok : {"auto", "onednn", "openblas"}) {
    EXPECT_TRUE(ValidateCpuKernels(ok).ok()) << ok;
  }
  EXPECT_THAT(ValidateCpuKernels("mkl").message(), HasSubstr("cpu_kernels"));
}

}  // namespace
}  // namespace ps
