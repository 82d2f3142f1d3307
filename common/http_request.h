// HTTP/1.x requests and responses for the daemons' small HTTP servers (the
// status page, /metrics): the request head parsed strictly, the response
// written whole. No sockets here (http_server.h has them), so the parser is
// fuzzed on its own (fuzz/http_request_fuzzer.cc).
//
//   const size_t end = HttpHeadEnd(received);     // npos: read more
//   ParsedHttpRequest parsed =
//       ParseHttpRequest(absl::string_view(received).substr(0, end));
//   if (parsed.error != 0) ... answer parsed.error, parsed.why and close
//   send(FormatHttpResponse(handler(parsed.request), true, keep_alive));
//
// Accepted: "METHOD /origin-form HTTP/1.0|1.1" and "name: value" header
// lines, each ended by CRLF. Refused with 400: an absolute-URI or other
// non-origin target, control characters, folded or nameless header lines,
// a bad Content-Length; with 505: any other HTTP version; with 431: more
// than kMaxHttpHeaders header lines.
#ifndef COMMON_HTTP_REQUEST_H_
#define COMMON_HTTP_REQUEST_H_

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace ps {

inline constexpr size_t kMaxHttpHeaders = 100;

struct HttpRequest {
  std::string method;  // "GET"
  std::string path;    // "/api/history"
  std::string query;   // "job=job-000001" ("" when none)
  // Header lines in order, names lower-cased, values trimmed.
  std::vector<std::pair<std::string, std::string>> headers;
  // HTTP/1.1 without "Connection: close", or HTTP/1.0 with
  // "Connection: keep-alive".
  bool keep_alive = false;
  // A Content-Length above 0 or a Transfer-Encoding: the servers read no
  // bodies, so they close such a connection after answering.
  bool has_body = false;

  // The value of the first header `name` (lower case), "" when absent.
  std::string Header(absl::string_view name) const;
};

struct HttpResponse {
  using Headers = std::vector<std::pair<std::string, std::string>>;
  HttpResponse(int status = 200,
               std::string content_type = "text/plain; charset=utf-8",
               std::string body = "", Headers headers = {})
      : status(status),
        content_type(std::move(content_type)),
        body(std::move(body)),
        headers(std::move(headers)) {}

  int status;
  std::string content_type;
  std::string body;
  // Extra header lines, e.g. {"WWW-Authenticate", "Basic realm=\"ps\""}.
  Headers headers;
};

// Where the request head at the start of `data` ends (the offset just past
// its blank line), or npos while it has not all arrived.
size_t HttpHeadEnd(absl::string_view data);

// Either the request or why it is refused: error is 0, or the HTTP status
// to answer (400, 431, 505) with `why` as the body.
struct ParsedHttpRequest {
  int error = 0;
  std::string why;
  HttpRequest request;
};

// Parses a request head (request line, header lines, the blank line).
ParsedHttpRequest ParseHttpRequest(absl::string_view head);

// "HTTP/1.1 STATUS REASON" with Content-Type, Content-Length, no caching,
// nosniff and Connection headers, then the body unless `with_body` is false
// (an answer to HEAD).
std::string FormatHttpResponse(const HttpResponse& response, bool with_body,
                               bool keep_alive);

// The value of `name` in a query string "a=1&b=2" ("" when absent). Values
// are returned as sent (no percent-decoding): callers accept only plain
// characters.
std::string QueryValue(const std::string& query, const std::string& name);

}  // namespace ps

#endif  // COMMON_HTTP_REQUEST_H_
