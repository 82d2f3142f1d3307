#include "common/text_proto.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/cluster.pb.h"

namespace ps {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(ParseTextProtoTest, SingularFieldGivenTwiceIsAnErrorEvenAfterADefault) {
  struct Case {
    std::string text;
    std::string error;  // "" = parses
  } cases[] = {
      {"shard_id: 0\nshard_id: 1\n",
       "f:2:1: Non-repeated field \"shard_id\" is specified"},
      {"shard_id: 1\nshard_id: 0\n", "f:2:"},
      {"log_level: \"\" log_level: \"info\"", "f:1:15:"},
      {"cluster_file: \"a\" \"b\"\nworker_timeout_ms: 2\nworker_timeout_ms: 3",
       "f:3:"},
      {"max_message_bytes: 65536 # shard_id: 1\nshard_id: 1", ""},
      {"shard_id: 1 listen_address: \"x:1\", log_level: 'info';", ""},
  };
  for (const Case& c : cases) {
    PsdConfig psd;
    absl::Status s = ParseTextProto(c.text, "f", &psd);
    if (c.error.empty()) {
      EXPECT_TRUE(s.ok()) << c.text << ": " << s;
    } else {
      EXPECT_THAT(std::string(s.message()), HasSubstr(c.error)) << c.text;
    }
  }
  // Repeated fields may repeat; singular fields repeat freely across
  // different messages of a repeated field.
  ClusterConfig cluster;
  EXPECT_TRUE(ParseTextProto(
                  "shards { address: \"a:1\" }\nshards { address: \"b:1\" }\n"
                  "tls { ca_file: \"x\" }",
                  "f", &cluster)
                  .ok());
  absl::Status s = ParseTextProto(
      "shards { address: \"a:1\" address: \"b:1\" }", "f", &cluster);
  EXPECT_THAT(
      std::string(s.message()),
      AllOf(HasSubstr("f:1:"), HasSubstr("Non-repeated field \"address\""),
            ::testing::Not(HasSubstr("(field"))));
  WorkerdConfig w;
  EXPECT_TRUE(ParseTextProto(
                  "devices: [\"cpu:0\", \"cpu:1\"] devices: \"cpu:2\"", "f", &w)
                  .ok());
}

class ReadFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = std::string(tmp ? tmp : "/tmp") + "/read_file_test";
    std::filesystem::create_directories(dir_);
  }
  std::string dir_;
};

TEST_F(ReadFileTest, RefusesWhatIsNotASmallRegularFile) {
  std::string out = "unchanged";
  absl::Status s = ReadFile(dir_, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr(dir_), HasSubstr("is a directory")));
  s = ReadFile("/dev/zero", &out);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("/dev/zero: is not a regular file"));
  std::string fifo = dir_ + "/fifo";
  std::filesystem::remove(fifo);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  s = ReadFile(fifo, &out);  // must not wait for a writer
  EXPECT_THAT(std::string(s.message()), HasSubstr("is not a regular file"));
  ASSERT_TRUE(WriteFileAtomically(dir_ + "/big", std::string(100, 'x')).ok());
  s = ReadFile(dir_ + "/big", &out, 99);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("100 bytes, more than the 99 allowed"));
  EXPECT_EQ(out, "unchanged");
  EXPECT_TRUE(ReadFile(dir_ + "/big", &out, 100).ok());
  EXPECT_EQ(out, std::string(100, 'x'));
  s = ReadFile(dir_ + "/missing", &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr(dir_ + "/missing"));
}

}  // namespace
}  // namespace ps
