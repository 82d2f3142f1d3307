#include "common/metrics_server.h"

#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/text_proto.h"
#include "prometheus/exposer.h"

namespace ps {
namespace {

std::string HostOf(const std::string& host_port) {
  return host_port.substr(0, host_port.rfind(':'));
}

}  // namespace

bool IsLoopbackAddress(const std::string& host_port) {
  const std::string host = HostOf(host_port);
  return host == "localhost" || host == "[::1]" ||
         absl::StartsWith(host, "127.");
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const Options& options,
    std::shared_ptr<prometheus::Collectable> collectable,
    const Security* security) {
  if (security->tls() && !IsLoopbackAddress(options.listen_address)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics_address: ", options.listen_address,
        ": /metrics is plain HTTP and the cluster uses TLS; bind it to a "
        "loopback address (127.0.0.1) and scrape through a TLS proxy"));
  }
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->collectable_ = std::move(collectable);
  try {
    server->exposer_ = std::make_unique<prometheus::Exposer>(
        options.listen_address, options.threads);
  } catch (const std::exception&) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics_address: cannot listen on ", options.listen_address,
        " (in use, or not an address of this machine)"));
  }
  const std::vector<int> ports = server->exposer_->GetListeningPorts();
  if (ports.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics_address: cannot listen on ",
                     options.listen_address, " (no port bound)"));
  }
  server->address_ =
      absl::StrCat(HostOf(options.listen_address), ":", ports.front());
  if (security->has_token()) {
    server->exposer_->RegisterAuth(
        [security](const std::string&, const std::string& password) {
          return security->TokenMatches(password);
        },
        "ps");
  }
  server->exposer_->RegisterCollectable(server->collectable_);
  if (!options.address_file.empty()) {
    absl::Status w =
        WriteFileAtomically(options.address_file, server->address_ + "\n");
    if (!w.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("metrics_address_file: ", w.message()));
    }
  }
  return server;
}

MetricsServer::~MetricsServer() = default;

}  // namespace ps
