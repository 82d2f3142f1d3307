#include "common/coordinator_client.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

TEST(ConnectCoordinatorTest, BadOptionsNameTheField) {
  struct Case {
    const char* what;
    ConnectOptions options;
    const char* field;
  };
  ConnectOptions none;
  ConnectOptions bad_address;
  bad_address.coordinator = "no-port";
  ConnectOptions zero_timeout;
  zero_timeout.coordinator = "127.0.0.1:7000";
  zero_timeout.timeout = absl::ZeroDuration();
  ConnectOptions bad_token;
  bad_token.coordinator = "127.0.0.1:7000";
  bad_token.token = "two words";
  ConnectOptions missing_file;
  missing_file.cluster_file = "/no/such/cluster.pbtxt";
  ConnectOptions missing_ca;
  missing_ca.coordinator = "127.0.0.1:7000";
  missing_ca.tls.set_ca_file("/no/such/ca.pem");
  const Case cases[] = {
      {"neither", none, "cluster_file or coordinator"},
      {"address", bad_address, "coordinator"},
      {"timeout", zero_timeout, "timeout"},
      {"token", bad_token, "token"},
      {"cluster file", missing_file, "/no/such/cluster.pbtxt"},
      {"ca file", missing_ca, "/no/such/ca.pem"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Connection> conn = ConnectCoordinator(c.options);
    ASSERT_FALSE(conn.ok()) << c.what;
    EXPECT_THAT(conn.status().message(), HasSubstr(c.field)) << c.what;
  }
}

TEST(ConnectCoordinatorTest, AddressAloneIsPlaintextWithoutToken) {
  ConnectOptions o;
  o.coordinator = "127.0.0.1:7000";
  absl::StatusOr<Connection> c = ConnectCoordinator(o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->coordinator, "127.0.0.1:7000");
  EXPECT_FALSE(c->security.tls());
  EXPECT_FALSE(c->security.has_token());
  EXPECT_TRUE(c->cluster.path.empty());
}

TEST(ConnectCoordinatorTest, CallerTokenIsUsed) {
  ConnectOptions o;
  o.coordinator = "127.0.0.1:7000";
  o.token = "s3cret";
  o.timeout = absl::Seconds(2);
  absl::StatusOr<Connection> c = ConnectCoordinator(o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->security.has_token());
  EXPECT_EQ(c->connect_timeout, absl::Seconds(2));
}

}  // namespace
}  // namespace ps
