#include "worker/workerd.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

WorkerdConfig WithDevices(const std::vector<std::string>& devices) {
  WorkerdConfig config;
  for (const std::string& d : devices) config.add_devices(d);
  return config;
}

TEST(CheckDevicesTest, NamesTheFirstDeviceThisMachineCannotDrive) {
  struct Case {
    std::vector<std::string> devices;
    bool cuda_built;
    int gpu_count;
    std::string error;  // "" = accepted
  } cases[] = {
      {{"cpu:0", "cpu:1"}, false, 0, ""},
      {{"cpu:0", "gpu:0"},
       false,
       0,
       "devices[1] \"gpu:0\": this workerd was built without CUDA"},
      {{"cpu:0", "gpu:0"},
       true,
       0,
       "devices[1] \"gpu:0\": no CUDA devices visible"},
      {{"gpu:0", "gpu:1"}, true, 2, ""},
      {{"gpu:0", "gpu:2"},
       true,
       2,
       "devices[1] \"gpu:2\": only 2 CUDA devices visible (gpu:0..gpu:1)"},
      {{"gpu:1"},
       true,
       1,
       "devices[0] \"gpu:1\": only 1 CUDA device visible (gpu:0..gpu:0)"},
  };
  for (const Case& c : cases) {
    absl::Status s =
        CheckDevices(WithDevices(c.devices), c.cuda_built, c.gpu_count);
    if (c.error.empty()) {
      EXPECT_TRUE(s.ok()) << s;
      continue;
    }
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(std::string(s.message()).substr(0, c.error.size()), c.error) << s;
  }
}

}  // namespace
}  // namespace ps
