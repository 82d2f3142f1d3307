#include "common/metrics_server.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/metric_writer.h"
#include "common/testing/http_test_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/cluster.pb.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

class OneGauge : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override {
    MetricWriter w;
    w.Gauge("ps_test_value", "A test value.", {{"job", "j"}}, 42);
    return w.Take();
  }
};

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

// A server of OneGauge on a free loopback port, without a token; null
// (and a test failure) when it does not start.
std::unique_ptr<MetricsServer> StartPlain() {
  static const Security* const plain = new Security();
  MetricsServer::Options options;
  options.listen_address = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start(options, std::make_shared<OneGauge>(), plain);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

TEST(MetricsServerTest, ServesTheCollectableAndWritesTheAddressFile) {
  Security plain;
  MetricsServer::Options options;
  options.listen_address = "127.0.0.1:0";
  options.address_file = TempPath("metrics.addr");
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start(options, std::make_shared<OneGauge>(), &plain);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_THAT((*server)->address(), HasSubstr("127.0.0.1:"));
  EXPECT_NE((*server)->address(), "127.0.0.1:0");
  std::ifstream in(options.address_file);
  std::string written;
  std::getline(in, written);
  EXPECT_EQ(written, (*server)->address());
  const std::string reply = HttpGet((*server)->address(), "/metrics");
  EXPECT_THAT(reply, HasSubstr("200 OK"));
  EXPECT_THAT(reply, HasSubstr("ps_test_value{job=\"j\"} 42"));
}

TEST(MetricsServerTest, PortInUseNamesTheAddress) {
  Security plain;
  MetricsServer::Options options;
  options.listen_address = "127.0.0.1:0";
  auto first =
      MetricsServer::Start(options, std::make_shared<OneGauge>(), &plain);
  ASSERT_TRUE(first.ok()) << first.status();
  options.listen_address = (*first)->address();
  auto second =
      MetricsServer::Start(options, std::make_shared<OneGauge>(), &plain);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      second.status().message(),
      HasSubstr("metrics_address: cannot listen on " + (*first)->address()));
}

TEST(MetricsServerTest, UnwritableAddressFileIsAnError) {
  Security plain;
  MetricsServer::Options options;
  options.listen_address = "127.0.0.1:0";
  options.address_file = TempPath("no/such/folder/metrics.addr");
  auto server =
      MetricsServer::Start(options, std::make_shared<OneGauge>(), &plain);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.status().message(), HasSubstr("metrics_address_file"));
}

TEST(MetricsServerTest, TokenIsTheBasicAuthPassword) {
  absl::StatusOr<Security> security =
      Security::FromParts(TlsConfig(), "s3cret");
  ASSERT_TRUE(security.ok()) << security.status();
  MetricsServer::Options options;
  options.listen_address = "127.0.0.1:0";
  auto server =
      MetricsServer::Start(options, std::make_shared<OneGauge>(), &*security);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->address();
  EXPECT_THAT(HttpGet(address, "/metrics"), HasSubstr("401"));
  EXPECT_THAT(
      HttpGet(address, "/metrics", "Basic " + absl::Base64Escape("ps:wrong")),
      HasSubstr("401"));
  const std::string ok =
      HttpGet(address, "/metrics", "Basic " + absl::Base64Escape("ps:s3cret"));
  EXPECT_THAT(ok, HasSubstr("200 OK"));
  EXPECT_THAT(ok, HasSubstr("ps_test_value"));
}

TEST(MetricsServerTest, OtherPathsAndMethodsAreRefused) {
  std::unique_ptr<MetricsServer> server = StartPlain();
  ASSERT_NE(server, nullptr);
  EXPECT_THAT(HttpGet(server->address(), "/"), HasSubstr("404"));
  EXPECT_THAT(HttpGet(server->address(), "/metrics?x=1"),
              HasSubstr("ps_test_value"));
}

// Issue 27: 500 connections that send nothing must not delay a scrape
// (the old server answered one connection at a time, 5 s each).
TEST(MetricsServerTest, IdleConnectionsDoNotBlockAScrape) {
  std::unique_ptr<MetricsServer> server = StartPlain();
  ASSERT_NE(server, nullptr);
  IdleConnections idle(server->address(), 500);
  ASSERT_EQ(idle.open(), 500);
  const absl::Time start = absl::Now();
  EXPECT_THAT(HttpGet(server->address(), "/metrics", "", absl::Seconds(3)),
              HasSubstr("ps_test_value"));
  // Generous: the target is 100 ms p99 (tools/bench/http_idle_bench.py).
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

// Issue 27: an unknown HTTP version is refused, not served.
TEST(MetricsServerTest, AnUnknownHttpVersionGets505) {
  std::unique_ptr<MetricsServer> server = StartPlain();
  ASSERT_NE(server, nullptr);
  const std::string reply = HttpExchange(
      server->address(), "GET /metrics HTTP/9.9\r\nHost: x\r\n\r\n");
  EXPECT_THAT(reply, HasSubstr("HTTP/1.1 505")) << reply;
}

TEST(IsLoopbackAddressTest, Table) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:9100"));
  EXPECT_TRUE(IsLoopbackAddress("127.1.2.3:0"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:9100"));
  EXPECT_TRUE(IsLoopbackAddress("localhost:9100"));
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0:9100"));
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.1:9100"));
  EXPECT_FALSE(IsLoopbackAddress("[::]:9100"));
  EXPECT_FALSE(IsLoopbackAddress("example.com:9100"));
}

}  // namespace
}  // namespace ps
