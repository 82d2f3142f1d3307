// TLS / mutual TLS credentials and bearer tokens for every service.
//
// Servers:
//   PS_ASSIGN_OR_RETURN(Security sec, Security::FromCluster(cluster.config));
//   builder.AddListeningPort(addr, sec.ServerCredentials(), &port);
//   ...in each handler: if (auto s = sec.CheckToken(*ctx); !s.ok()) ...
// Clients:
//   auto channel = sec.NewChannel("127.0.0.1:7001");
//   grpc::ClientContext ctx;  sec.Authorize(&ctx);
#ifndef COMMON_SECURITY_H_
#define COMMON_SECURITY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "proto/cluster.pb.h"

namespace ps {

// Immutable after construction; safe to share between threads.
class Security {
 public:
  // Plaintext, no token: for tests of the core paths.
  Security() = default;

  // Reads the PEM files and the token file named by the cluster config
  // (paths already resolved by LoadClusterConfig). Errors name the field.
  static absl::StatusOr<Security> FromCluster(const ClusterConfig& cluster);
  static absl::StatusOr<Security> FromParts(const TlsConfig& tls,
                                            const std::string& token);

  std::shared_ptr<grpc::ServerCredentials> ServerCredentials() const;
  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() const;

  // A channel to `address` with these credentials and the channel arguments
  // this project uses everywhere (message size limit, keepalive). With
  // `pacing_bytes_per_s` > 0 its connection sends at most that many bytes
  // per second (common/socket_pacing.h).
  std::shared_ptr<grpc::Channel> NewChannel(
      const std::string& address, int max_message_bytes = 4 << 20,
      uint64_t pacing_bytes_per_s = 0) const;

  // Attaches the bearer token (if any) to an outgoing call.
  void Authorize(grpc::ClientContext* context) const;

  // Unauthenticated unless the call carries "authorization: Bearer <token>"
  // (when a token is configured). Constant-time comparison.
  absl::Status CheckToken(const grpc::ServerContextBase& context) const;

  // Whether `candidate` is the configured token (true when none is
  // configured): for transports without gRPC metadata (HTTP /metrics).
  // Constant-time comparison.
  bool TokenMatches(absl::string_view candidate) const;

  bool tls() const { return tls_on_; }
  bool has_token() const { return !token_.empty(); }

 private:
  bool tls_on_ = false;
  bool mutual_ = false;
  std::string cert_pem_, key_pem_, ca_pem_, server_name_override_;
  std::string token_;
};

}  // namespace ps

#endif  // COMMON_SECURITY_H_
