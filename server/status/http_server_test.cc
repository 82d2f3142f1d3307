#include "server/status/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

// Sends `request` to the server at "127.0.0.1:PORT" and reads the answer
// until the server closes (every read bounded by 5 s).
std::string Exchange(const std::string& address, const std::string& request) {
  int port = 0;
  EXPECT_TRUE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port));
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "connect failed";
  }
  (void)!write(fd, request.data(), request.size());
  std::string answer;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) answer.append(buf, n);
  close(fd);
  return answer;
}

std::string Get(const std::string& address, const std::string& target) {
  return Exchange(address, "GET " + target +
                               " HTTP/1.1\r\nHost: x\r\n"
                               "Connection: close\r\n\r\n");
}

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpServer::Routes routes;
    routes["/"] = [](const HttpRequest&) {
      return HttpResponse{200, "text/html", "<p>hi</p>"};
    };
    routes["/echo"] = [](const HttpRequest& r) {
      return HttpResponse{200, "text/plain", QueryValue(r.query, "job")};
    };
    absl::StatusOr<std::unique_ptr<HttpServer>> server =
        HttpServer::Start(HttpServer::Options(), std::move(routes));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerTest, ServesRoutesOnTheBoundLoopbackPort) {
  EXPECT_TRUE(absl::StartsWith(server_->address(), "127.0.0.1:"));
  EXPECT_NE(server_->address(), "127.0.0.1:0");
  const std::string page = Get(server_->address(), "/");
  EXPECT_TRUE(absl::StartsWith(page, "HTTP/1.1 200")) << page;
  EXPECT_TRUE(absl::StrContains(page, "Content-Type: text/html")) << page;
  EXPECT_TRUE(absl::EndsWith(page, "<p>hi</p>")) << page;
  const std::string echo = Get(server_->address(), "/echo?a=1&job=job-7");
  EXPECT_TRUE(absl::EndsWith(echo, "\r\n\r\njob-7")) << echo;
}

TEST_F(HttpServerTest, UnknownPathsMethodsAndHugeRequestsAreRefused) {
  EXPECT_TRUE(
      absl::StartsWith(Get(server_->address(), "/nope"), "HTTP/1.1 404"));
  EXPECT_TRUE(absl::StartsWith(
      Exchange(server_->address(),
               "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"),
      "HTTP/1.1 405"));
  const std::string huge =
      "GET /" + std::string(64 << 10, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string answer = Exchange(server_->address(), huge);
  EXPECT_FALSE(absl::StartsWith(answer, "HTTP/1.1 200")) << answer;
  // Still serving.
  EXPECT_TRUE(absl::StartsWith(Get(server_->address(), "/"), "HTTP/1.1 200"));
}

TEST_F(HttpServerTest, AnAddressInUseIsAnErrorNamingIt) {
  HttpServer::Options options;
  options.address = server_->address();
  absl::StatusOr<std::unique_ptr<HttpServer>> second =
      HttpServer::Start(options, {});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(second.status().message(), server_->address()))
      << second.status();
}

TEST(QueryValueTest, FindsTheNamedValue) {
  EXPECT_EQ(QueryValue("job=a&x=2", "job"), "a");
  EXPECT_EQ(QueryValue("x=2&job=b", "job"), "b");
  EXPECT_EQ(QueryValue("jobs=c", "job"), "");
  EXPECT_EQ(QueryValue("", "job"), "");
}

}  // namespace
}  // namespace ps
