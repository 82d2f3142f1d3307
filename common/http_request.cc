#include "common/http_request.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ps {
namespace {

constexpr absl::string_view kEndOfHead = "\r\n\r\n";

ParsedHttpRequest Refuse(int status, std::string why) {
  ParsedHttpRequest parsed;
  parsed.error = status;
  parsed.why = std::move(why);
  return parsed;
}

// RFC 9110 tchar: the characters of methods and header names.
bool IsToken(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(c) && !absl::StrContains("!#$%&'*+-.^_`|~", c)) {
      return false;
    }
  }
  return true;
}

// Visible ASCII only: no spaces, no controls, no bytes above 0x7e.
bool IsVisible(absl::string_view s) {
  for (char c : s) {
    if (c <= 0x20 || c >= 0x7f) return false;
  }
  return true;
}

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return status < 500 ? "Client Error" : "Server Error";
  }
}

// Checks "METHOD TARGET HTTP/x.y" into `r`; 0 or the refusing status.
int ParseRequestLine(absl::string_view line, HttpRequest* r, std::string* why,
                     bool* http11) {
  const std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || !IsToken(parts[0]) || !IsVisible(parts[1])) {
    *why = "want METHOD /path HTTP/1.1\n";
    return 400;
  }
  absl::string_view version = parts[2];
  if (version == "HTTP/1.1" || version == "HTTP/1.0") {
    *http11 = version == "HTTP/1.1";
  } else if (version.size() == 8 && absl::StartsWith(version, "HTTP/") &&
             absl::ascii_isdigit(version[5]) && version[6] == '.' &&
             absl::ascii_isdigit(version[7])) {
    *why = "HTTP/1.0 and HTTP/1.1 only\n";
    return 505;
  } else {
    *why = "want METHOD /path HTTP/1.1\n";
    return 400;
  }
  // Origin form only: an absolute URI ("http://x/..."), an authority or
  // "*" names no page of this server.
  if (!absl::StartsWith(parts[1], "/")) {
    *why = "the target must be a path starting with /\n";
    return 400;
  }
  r->method = std::string(parts[0]);
  const size_t q = parts[1].find('?');
  r->path = std::string(parts[1].substr(0, q));
  if (q != absl::string_view::npos)
    r->query = std::string(parts[1].substr(q + 1));
  return 0;
}

}  // namespace

std::string HttpRequest::Header(absl::string_view name) const {
  for (const auto& [n, value] : headers) {
    if (n == name) return value;
  }
  return "";
}

size_t HttpHeadEnd(absl::string_view data) {
  const size_t at = data.find(kEndOfHead);
  return at == absl::string_view::npos ? at : at + kEndOfHead.size();
}

ParsedHttpRequest ParseHttpRequest(absl::string_view head) {
  if (!absl::ConsumeSuffix(&head, kEndOfHead)) {
    return Refuse(400, "the request head must end with an empty line\n");
  }
  std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  ParsedHttpRequest parsed;
  HttpRequest& r = parsed.request;
  bool http11 = false;
  parsed.error = ParseRequestLine(lines[0], &r, &parsed.why, &http11);
  if (parsed.error != 0) return parsed;
  if (lines.size() - 1 > kMaxHttpHeaders) {
    return Refuse(
        431, absl::StrCat("more than ", kMaxHttpHeaders, " header lines\n"));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos ||
        !IsToken(lines[i].substr(0, colon))) {
      return Refuse(400, "want \"name: value\" header lines\n");
    }
    absl::string_view value =
        absl::StripAsciiWhitespace(lines[i].substr(colon + 1));
    for (char c : value) {
      if ((c < 0x20 && c != '\t') || c == 0x7f) {
        return Refuse(400, "control characters in a header value\n");
      }
    }
    r.headers.emplace_back(absl::AsciiStrToLower(lines[i].substr(0, colon)),
                           std::string(value));
  }
  const std::string length = r.Header("content-length");
  uint64_t bytes = 0;
  if (!length.empty() && !absl::SimpleAtoi(length, &bytes)) {
    return Refuse(400, "Content-Length: not a number\n");
  }
  r.has_body = bytes > 0 || !r.Header("transfer-encoding").empty();
  const std::string connection = absl::AsciiStrToLower(r.Header("connection"));
  r.keep_alive = http11 ? !absl::StrContains(connection, "close")
                        : absl::StrContains(connection, "keep-alive");
  return parsed;
}

std::string FormatHttpResponse(const HttpResponse& response, bool with_body,
                               bool keep_alive) {
  std::string out = absl::StrCat(
      "HTTP/1.1 ", response.status, " ", Reason(response.status),
      "\r\nContent-Type: ", response.content_type,
      "\r\nContent-Length: ", response.body.size(),
      "\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
      "Connection: ",
      keep_alive ? "keep-alive" : "close", "\r\n");
  for (const auto& [name, value] : response.headers) {
    absl::StrAppend(&out, name, ": ", value, "\r\n");
  }
  absl::StrAppend(&out, "\r\n");
  if (with_body) absl::StrAppend(&out, response.body);
  return out;
}

std::string QueryValue(const std::string& query, const std::string& name) {
  for (absl::string_view pair : absl::StrSplit(query, '&')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(pair, absl::MaxSplits('=', 1));
    if (kv.first == name) return std::string(kv.second);
  }
  return "";
}

}  // namespace ps
