// ShardDirectory against real address files in TEST_TMPDIR, on a fake
// clock: moves are seen after the refresh interval, bad files keep the last
// good address and are named, fixed addresses never change.
#include "server/coordinator/shard_directory.h"

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/text_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class ShardDirectoryTest : public ::testing::Test {
 protected:
  ShardDirectoryTest() {
    dir_ = absl::StrCat(
        std::getenv("TEST_TMPDIR"), "/",
        ::testing::UnitTest::GetInstance()->current_test_info()->name(), "-",
        getpid());
    std::filesystem::create_directories(dir_);
    // Shard 0 at a fixed address, shard 1 through its address file.
    cluster_.path = dir_ + "/cluster.pbtxt";
    cluster_.config.add_shards()->set_address("127.0.0.1:7000");
    cluster_.config.add_shards()->set_address_file("s1.addr");
  }

  void Write(const std::string& contents) {
    ASSERT_TRUE(WriteFileAtomically(file(), contents).ok());
  }
  std::string file() const { return dir_ + "/s1.addr"; }

  std::unique_ptr<ShardDirectory> Make() {
    ShardDirectory::Options options;
    options.refresh_interval = absl::Milliseconds(100);
    options.clock = [this] { return now_; };
    absl::StatusOr<std::unique_ptr<ShardDirectory>> d = ShardDirectory::Create(
        cluster_, {"127.0.0.1:7000", "127.0.0.1:7001"}, options);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? *std::move(d) : nullptr;
  }

  std::string dir_;
  LoadedCluster cluster_;
  absl::Time now_ = absl::FromUnixSeconds(1000);
};

TEST_F(ShardDirectoryTest, AMovedShardIsSeenAfterTheRefreshInterval) {
  Write("127.0.0.1:7001\n");
  std::unique_ptr<ShardDirectory> d = Make();
  ASSERT_NE(d, nullptr);
  Write("127.0.0.1:7555\n");
  // Within the interval the last reading stands: no file system traffic
  // per call.
  EXPECT_EQ(d->Address(1), "127.0.0.1:7001");
  now_ += absl::Milliseconds(100);
  ShardDirectory::Snapshot s = d->Current();
  EXPECT_THAT(s.addresses, ElementsAre("127.0.0.1:7000", "127.0.0.1:7555"));
  EXPECT_THAT(s.problems, IsEmpty());
  EXPECT_EQ(d->Address(7), "");
}

TEST_F(ShardDirectoryTest, BadOrMissingFilesKeepTheLastGoodAddress) {
  std::unique_ptr<ShardDirectory> d = Make();
  ASSERT_NE(d, nullptr);
  struct Case {
    const char* contents;  // nullptr: no file
    const char* problem;
  };
  const std::vector<Case> cases = {
      {nullptr, "not written"},
      {"", "empty"},
      {"garbage\n", "\"garbage\" is not host:port"},
      {"127.0.0.1:99999", "has no valid port"},
      {"[::1:80", "unclosed [IPv6]"},
  };
  for (const Case& c : cases) {
    std::filesystem::remove(file());
    if (c.contents != nullptr) Write(c.contents);
    now_ += absl::Seconds(1);
    ShardDirectory::Snapshot s = d->Current();
    EXPECT_THAT(s.addresses, ElementsAre("127.0.0.1:7000", "127.0.0.1:7001"))
        << c.problem;
    ASSERT_EQ(s.problems.size(), 1u) << c.problem;
    EXPECT_THAT(s.problems[0],
                HasSubstr(absl::StrCat("shards[1].address_file ", file())));
    EXPECT_THAT(s.problems[0], HasSubstr(c.problem));
  }
  // A file far larger than an address is refused without being read whole.
  Write(std::string(1 << 20, '1'));
  now_ += absl::Seconds(1);
  ShardDirectory::Snapshot s = d->Current();
  EXPECT_EQ(s.addresses[1], "127.0.0.1:7001");
  ASSERT_EQ(s.problems.size(), 1u);
  EXPECT_THAT(s.problems[0], HasSubstr(file()));
  // A good file again: found, problems gone.
  Write("127.0.0.1:7002");
  now_ += absl::Seconds(1);
  EXPECT_EQ(d->Address(1), "127.0.0.1:7002");
  EXPECT_THAT(d->Current().problems, IsEmpty());
}

TEST_F(ShardDirectoryTest, CreateNeedsOneAddressPerShard) {
  absl::StatusOr<std::unique_ptr<ShardDirectory>> d =
      ShardDirectory::Create(cluster_, {"127.0.0.1:7000"}, {});
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("1 addresses"));
}

}  // namespace
}  // namespace ps
