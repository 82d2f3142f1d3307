#include "common/http_request.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

struct Case {
  std::string head;
  int error;  // 0: parsed
};

TEST(ParseHttpRequestTest, RefusesWhatIsNotAPlainRequest) {
  const Case cases[] = {
      {"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 0},
      {"HEAD /?a=1 HTTP/1.0\r\n\r\n", 0},
      {"GET http://x/../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n", 400},
      {"GET * HTTP/1.1\r\n\r\n", 400},
      {"GET x:80 HTTP/1.1\r\n\r\n", 400},
      {"GET /metrics HTTP/9.9\r\n\r\n", 505},
      {"GET /metrics HTTP/2.0\r\n\r\n", 505},
      {"GET /metrics HTTP/1.1x\r\n\r\n", 400},
      {"GET /metrics\r\n\r\n", 400},
      {"GET  /metrics HTTP/1.1\r\n\r\n", 400},
      {"GET  HTTP/1.0\r\n\r\n", 400},  // found by the fuzzer
      {"GET /a\x01 HTTP/1.1\r\n\r\n", 400},
      {"GET /a\xff HTTP/1.1\r\n\r\n", 400},
      {"G(T / HTTP/1.1\r\n\r\n", 400},
      {"\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nno colon\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\n folded: x\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\n: nameless\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nX: a\x01\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\n", 400},  // no blank line
  };
  for (const Case& c : cases) {
    const ParsedHttpRequest parsed = ParseHttpRequest(c.head);
    EXPECT_EQ(parsed.error, c.error) << c.head;
    EXPECT_EQ(parsed.why.empty(), c.error == 0) << c.head;
  }
  std::string many = "GET / HTTP/1.1\r\n";
  for (size_t i = 0; i <= kMaxHttpHeaders; ++i) many += "X: y\r\n";
  EXPECT_EQ(ParseHttpRequest(many + "\r\n").error, 431);
}

TEST(ParseHttpRequestTest, ReadsTargetHeadersAndConnection) {
  ParsedHttpRequest p = ParseHttpRequest(
      "GET /api/history?job=j-1 HTTP/1.1\r\nHost: x\r\n"
      "Authorization:  Basic abc \r\n\r\n");
  ASSERT_EQ(p.error, 0) << p.why;
  EXPECT_EQ(p.request.method, "GET");
  EXPECT_EQ(p.request.path, "/api/history");
  EXPECT_EQ(p.request.query, "job=j-1");
  EXPECT_EQ(p.request.Header("authorization"), "Basic abc");
  EXPECT_EQ(p.request.Header("cookie"), "");
  EXPECT_TRUE(p.request.keep_alive);
  EXPECT_FALSE(p.request.has_body);

  EXPECT_FALSE(ParseHttpRequest("GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
                   .request.keep_alive);
  EXPECT_FALSE(ParseHttpRequest("GET / HTTP/1.0\r\n\r\n").request.keep_alive);
  EXPECT_TRUE(
      ParseHttpRequest("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")
          .request.keep_alive);
  EXPECT_TRUE(ParseHttpRequest("POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\n")
                  .request.has_body);
  EXPECT_TRUE(
      ParseHttpRequest("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
          .request.has_body);
}

TEST(HttpHeadEndTest, FindsTheBlankLine) {
  EXPECT_EQ(HttpHeadEnd("GET / HTTP/1.1\r\n"), std::string::npos);
  EXPECT_EQ(HttpHeadEnd("GET / HTTP/1.1\r\n\r\nGET"), 18u);
}

TEST(FormatHttpResponseTest, WritesHeadersAndBody) {
  HttpResponse r{401, "text/plain", "no\n", {{"WWW-Authenticate", "Basic"}}};
  const std::string out = FormatHttpResponse(r, true, false);
  EXPECT_TRUE(absl::StartsWith(out, "HTTP/1.1 401 Unauthorized\r\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "Content-Length: 3\r\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "Connection: close\r\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "WWW-Authenticate: Basic\r\n")) << out;
  EXPECT_TRUE(absl::EndsWith(out, "\r\n\r\nno\n")) << out;
  const std::string head = FormatHttpResponse(r, false, true);
  EXPECT_TRUE(absl::EndsWith(head, "\r\n\r\n")) << head;
  EXPECT_TRUE(absl::StrContains(head, "Connection: keep-alive")) << head;
}

TEST(QueryValueTest, FindsTheNamedValue) {
  EXPECT_EQ(QueryValue("job=a&x=2", "job"), "a");
  EXPECT_EQ(QueryValue("x=2&job=b", "job"), "b");
  EXPECT_EQ(QueryValue("jobs=c", "job"), "");
  EXPECT_EQ(QueryValue("", "job"), "");
}

}  // namespace
}  // namespace ps
