#include "common/coordinator_client.h"

#include <utility>

#include "common/status_macros.h"

namespace ps {
namespace {

bool TlsSet(const TlsConfig& t) {
  return !t.ca_file().empty() || !t.cert_file().empty() ||
         !t.key_file().empty();
}

// The security settings: the cluster file's (if any), with `options`
// TLS and token in place of its own.
absl::StatusOr<Security> SecurityFor(const ConnectOptions& options,
                                     const LoadedCluster* cluster) {
  ClusterConfig config;
  if (cluster != nullptr) config = cluster->config;
  if (TlsSet(options.tls)) *config.mutable_tls() = options.tls;
  if (options.token.empty()) return Security::FromCluster(config);
  // It travels as an HTTP/2 header value: visible ASCII only.
  for (char ch : options.token) {
    if (ch < 0x21 || ch > 0x7e) {
      return absl::InvalidArgumentError(
          "token: holds a character that is not visible ASCII");
    }
  }
  return Security::FromParts(config.tls(), options.token);
}

}  // namespace

absl::StatusOr<Connection> ConnectCoordinator(const ConnectOptions& options) {
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("timeout: not a positive duration");
  }
  if (options.cluster_file.empty() && options.coordinator.empty()) {
    return absl::InvalidArgumentError(
        "cluster_file or coordinator: one of them must be given");
  }
  Connection c;
  c.connect_timeout = options.timeout;
  if (!options.coordinator.empty()) {
    PS_RETURN_IF_ERROR(ValidateHostPort(options.coordinator, "coordinator",
                                        /*allow_port_zero=*/false));
    c.coordinator = options.coordinator;
  }
  if (options.cluster_file.empty()) {
    PS_ASSIGN_OR_RETURN(c.security, SecurityFor(options, nullptr));
    return c;
  }
  PS_ASSIGN_OR_RETURN(c.cluster, LoadClusterConfig(options.cluster_file));
  PS_ASSIGN_OR_RETURN(c.security, SecurityFor(options, &c.cluster));
  if (!c.coordinator.empty()) return c;
  absl::StatusOr<std::string> addr =
      ResolveCoordinatorAddress(c.cluster, absl::Now() + c.connect_timeout);
  if (!addr.ok()) return absl::UnavailableError(addr.status().message());
  c.coordinator = *std::move(addr);
  return c;
}

}  // namespace ps
