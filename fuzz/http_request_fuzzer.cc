// libFuzzer target: the request parsing of the status page's and /metrics'
// HTTP server (common/http_request.h).
//
//   bazel run //fuzz:http_request_fuzzer -- -max_total_time=60
//   $PWD/fuzz/corpus/http
//
// The input is what a client sent. As the server does, the head is cut at
// HttpHeadEnd (or taken whole) and parsed; the query is looked up and the
// answer formatted.
//
// Properties checked (a violation aborts):
//   * nothing crashes or trips ASan/UBSan, on any bytes;
//   * a refusal is 400, 431 or 505 with a reason to send back;
//   * a parsed request has a token method and a path starting with '/'
//     made of visible ASCII only (so no absolute URI reaches a handler),
//     and at most kMaxHttpHeaders headers with lower-case names;
//   * a formatted answer states the Content-Length of its body.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/http_request.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "property violated: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t end = ps::HttpHeadEnd(input);
  const std::string head =
      end == std::string::npos ? input : input.substr(0, end);
  const ps::ParsedHttpRequest parsed = ps::ParseHttpRequest(head);
  if (parsed.error != 0) {
    Check(parsed.error == 400 || parsed.error == 431 || parsed.error == 505,
          "a refusal is 400, 431 or 505");
    Check(!parsed.why.empty(), "a refusal says why");
    return 0;
  }
  const ps::HttpRequest& r = parsed.request;
  Check(!r.method.empty(), "a method");
  Check(!r.path.empty() && r.path[0] == '/', "the path starts with /");
  for (char c : r.path + r.query) {
    Check(c > 0x20 && c < 0x7f, "the target is visible ASCII");
  }
  Check(r.headers.size() <= ps::kMaxHttpHeaders, "at most kMaxHttpHeaders");
  for (const auto& [name, value] : r.headers) {
    Check(name == absl::AsciiStrToLower(name), "header names lower-cased");
  }
  (void)ps::QueryValue(r.query, "job");
  const ps::HttpResponse response(200, "text/plain", r.path);
  const std::string out = ps::FormatHttpResponse(response, true, r.keep_alive);
  Check(absl::StrContains(
            out, absl::StrCat("Content-Length: ", r.path.size(), "\r\n")),
        "the Content-Length of the body");
  return 0;
}
