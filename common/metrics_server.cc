#include "common/metrics_server.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/text_proto.h"
#include "prometheus/text_serializer.h"

namespace ps {
namespace {

// The password of an "Authorization: Basic base64(user:password)" header
// value ("" when there is none).
std::string BasicAuthPassword(absl::string_view value) {
  if (!absl::ConsumePrefix(&value, "Basic ")) return "";
  std::string decoded;
  if (!absl::Base64Unescape(absl::StripAsciiWhitespace(value), &decoded)) {
    return "";
  }
  const size_t sep = decoded.find(':');
  return sep == std::string::npos ? "" : decoded.substr(sep + 1);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const Options& options,
    std::shared_ptr<prometheus::Collectable> collectable,
    const Security* security) {
  const std::string& address = options.listen_address;
  if (security->tls() && !IsLoopbackAddress(address)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics_address: ", address,
        ": /metrics is plain HTTP and the cluster uses TLS; bind it to a "
        "loopback address (127.0.0.1) and scrape through a TLS proxy"));
  }
  HttpServer::Routes routes;
  routes["/metrics"] = [collectable = std::move(collectable),
                        security](const HttpRequest& request) {
    if (security->has_token() && !security->TokenMatches(BasicAuthPassword(
                                     request.Header("authorization")))) {
      return HttpResponse{401,
                          "text/plain; charset=utf-8",
                          "the cluster token is the basic-auth password\n",
                          {{"WWW-Authenticate", "Basic realm=\"ps\""}}};
    }
    return HttpResponse{
        200,
        "text/plain; version=0.0.4; charset=utf-8",
        prometheus::TextSerializer().Serialize(collectable->Collect()),
        {}};
  };
  HttpServer::Options http;
  http.address = address;
  http.field = "metrics_address";
  http.threads = 1;  // scrapes in turn: a Collect reads the whole daemon
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  absl::StatusOr<std::unique_ptr<HttpServer>> started =
      HttpServer::Start(http, std::move(routes));
  if (!started.ok()) return started.status();
  server->http_ = *std::move(started);
  if (!options.address_file.empty()) {
    absl::Status w =
        WriteFileAtomically(options.address_file, server->address() + "\n");
    if (!w.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("metrics_address_file: ", w.message()));
    }
  }
  return server;
}

}  // namespace ps
