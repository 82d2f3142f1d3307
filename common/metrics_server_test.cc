#include "common/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/metric_writer.h"
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

// GET `path` from "127.0.0.1:port" with HTTP/1.0; the whole response.
std::string HttpGet(const std::string& address, const std::string& path,
                    const std::string& authorization = "") {
  int port = 0;
  if (!absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port)) {
    return "bad address";
  }
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    close(fd);
    return "connect failed";
  }
  std::string req = absl::StrCat("GET ", path, " HTTP/1.0\r\n");
  if (!authorization.empty()) {
    absl::StrAppend(&req, "Authorization: ", authorization, "\r\n");
  }
  req += "\r\n";
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return "write failed";
  }
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, n);
  close(fd);
  return out;
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
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
  Security plain;
  MetricsServer::Options options;
  options.listen_address = "127.0.0.1:0";
  auto server =
      MetricsServer::Start(options, std::make_shared<OneGauge>(), &plain);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_THAT(HttpGet((*server)->address(), "/"), HasSubstr("404"));
  EXPECT_THAT(HttpGet((*server)->address(), "/metrics?x=1"),
              HasSubstr("ps_test_value"));
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
