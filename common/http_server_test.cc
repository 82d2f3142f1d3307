#include "common/http_server.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "common/testing/http_test_client.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

std::string Get(const std::string& address, const std::string& target) {
  return HttpExchange(address, "GET " + target +
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
      HttpExchange(server_->address(),
                   "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"),
      "HTTP/1.1 405"));
  const std::string huge =
      "GET /" + std::string(64 << 10, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string answer = HttpExchange(server_->address(), huge);
  EXPECT_FALSE(absl::StartsWith(answer, "HTTP/1.1 200")) << answer;
  // Still serving.
  EXPECT_TRUE(absl::StartsWith(Get(server_->address(), "/"), "HTTP/1.1 200"));
}

// Issue 27: an absolute-URI request line is answered 400, not dropped.
TEST_F(HttpServerTest, AnAbsoluteUriGets400) {
  const std::string reply =
      HttpExchange(server_->address(),
                   "GET http://x/../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(reply, "HTTP/1.1 400")) << reply;
}

// Issue 27: 500 connections that send nothing must not hold the server's
// threads (the old pool of 2 threads waited 5 s on each).
TEST_F(HttpServerTest, IdleConnectionsDoNotBlockAGet) {
  IdleConnections idle(server_->address(), 500);
  ASSERT_EQ(idle.open(), 500);
  const absl::Time start = absl::Now();
  const std::string page = HttpExchange(
      server_->address(), "GET / HTTP/1.0\r\n\r\n", absl::Seconds(3));
  EXPECT_TRUE(absl::StartsWith(page, "HTTP/1.1 200")) << page;
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST_F(HttpServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  const std::string two =
      "GET /echo?job=a HTTP/1.1\r\nHost: x\r\n\r\n"
      "GET /echo?job=b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  const std::string reply = HttpExchange(server_->address(), two);
  EXPECT_TRUE(absl::StrContains(reply, "Connection: keep-alive")) << reply;
  EXPECT_TRUE(absl::StrContains(reply, "\r\n\r\naHTTP/1.1 200")) << reply;
  EXPECT_TRUE(absl::EndsWith(reply, "\r\n\r\nb")) << reply;
  const std::string head =
      HttpExchange(server_->address(), "HEAD / HTTP/1.0\r\n\r\n");
  EXPECT_TRUE(absl::EndsWith(head, "\r\n\r\n")) << head;
}

// A server with short limits: 300 ms to send a request, 4 connections.
class HttpServerLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpServer::Options options;
    options.header_timeout_ms = 300;
    options.max_connections = 4;
    HttpServer::Routes routes;
    routes["/"] = [](const HttpRequest&) {
      return HttpResponse{200, "text/plain", "ok", {}};
    };
    absl::StatusOr<std::unique_ptr<HttpServer>> server =
        HttpServer::Start(options, std::move(routes));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerLimitsTest, ASlowRequestGets408AndIsClosed) {
  const absl::Time start = absl::Now();
  // Half a request line, then nothing: answered 408 once the header
  // timeout passes (HttpExchange reads until the server closes).
  const std::string reply = HttpExchange(server_->address(), "GET / HT");
  EXPECT_TRUE(absl::StartsWith(reply, "HTTP/1.1 408")) << reply;
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(250));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_F(HttpServerLimitsTest, ConnectionsOverTheCapAreRefusedAtOnce) {
  IdleConnections idle(server_->address(), 4);
  ASSERT_EQ(idle.open(), 4);
  const std::string refused = HttpGet(server_->address(), "/");
  EXPECT_TRUE(absl::StartsWith(refused, "HTTP/1.1 503")) << refused;
  // The idle ones time out and are closed; then a GET is served again.
  EXPECT_EQ(idle.ClosedByServer(absl::Seconds(10)), 4);
  EXPECT_TRUE(
      absl::StartsWith(HttpGet(server_->address(), "/"), "HTTP/1.1 200"));
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

}  // namespace
}  // namespace ps
