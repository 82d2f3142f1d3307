#include "common/security.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/socket_pacing.h"
#include "common/status_macros.h"
#include "common/text_proto.h"

namespace ps {
namespace {

absl::Status ReadPem(const std::string& path, const std::string& field,
                     std::string* out) {
  if (path.empty()) return absl::OkStatus();
  absl::Status s = ReadFile(path, out);
  if (!s.ok())
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", s.message()));
  if (out->find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", path, " is not a PEM file"));
  }
  return absl::OkStatus();
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

}  // namespace

absl::StatusOr<Security> Security::FromCluster(const ClusterConfig& cluster) {
  std::string token;
  if (!cluster.auth_token_file().empty()) {
    absl::Status s = ReadFile(cluster.auth_token_file(), &token);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("auth_token_file: ", s.message()));
    }
    token = std::string(absl::StripAsciiWhitespace(token));
    if (token.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "auth_token_file: ", cluster.auth_token_file(), " is empty"));
    }
    // It travels as an HTTP/2 header value: visible ASCII only, or every
    // call would fail inside gRPC with a confusing error.
    for (char c : token) {
      if (c < 0x21 || c > 0x7e) {
        return absl::InvalidArgumentError(
            absl::StrCat("auth_token_file: ", cluster.auth_token_file(),
                         " holds a character that is not visible ASCII"));
      }
    }
  }
  return FromParts(cluster.tls(), token);
}

absl::StatusOr<Security> Security::FromParts(const TlsConfig& tls,
                                             const std::string& token) {
  Security s;
  s.token_ = token;
  s.tls_on_ = !tls.ca_file().empty();
  s.mutual_ = tls.mutual();
  s.server_name_override_ = tls.server_name_override();
  PS_RETURN_IF_ERROR(ReadPem(tls.cert_file(), "tls.cert_file", &s.cert_pem_));
  PS_RETURN_IF_ERROR(ReadPem(tls.key_file(), "tls.key_file", &s.key_pem_));
  PS_RETURN_IF_ERROR(ReadPem(tls.ca_file(), "tls.ca_file", &s.ca_pem_));
  return s;
}

std::shared_ptr<grpc::ServerCredentials> Security::ServerCredentials() const {
  if (!tls_on_) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      mutual_ ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
              : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_root_certs = ca_pem_;
  options.pem_key_cert_pairs.push_back({key_pem_, cert_pem_});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> Security::ChannelCredentials() const {
  if (!tls_on_) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = ca_pem_;
  options.pem_private_key = key_pem_;
  options.pem_cert_chain = cert_pem_;
  return grpc::SslCredentials(options);
}

std::shared_ptr<grpc::Channel> Security::NewChannel(
    const std::string& address, int max_message_bytes,
    uint64_t pacing_bytes_per_s) const {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(max_message_bytes);
  args.SetMaxSendMessageSize(max_message_bytes);
  // Keep idle channels alive across long BSP waits; detect dead peers.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 20000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Reconnect quickly after a shard restarts.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  // Every channel gets its own connection: with gRPC's global subchannel
  // pool, channels with equal arguments to one address share a single TCP
  // connection, which one thread at a time reads and writes. PsClient opens
  // channels_per_shard channels per shard to use several.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  SetClientPacing(pacing_bytes_per_s, &args);
  if (!server_name_override_.empty()) {
    args.SetSslTargetNameOverride(server_name_override_);
  }
  return grpc::CreateCustomChannel(address, ChannelCredentials(), args);
}

void Security::Authorize(grpc::ClientContext* context) const {
  if (!token_.empty())
    context->AddMetadata("authorization", "Bearer " + token_);
}

absl::Status Security::CheckToken(
    const grpc::ServerContextBase& context) const {
  if (token_.empty()) return absl::OkStatus();
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) {
    return absl::UnauthenticatedError("missing authorization: Bearer token");
  }
  absl::string_view value(it->second.data(), it->second.size());
  if (!absl::ConsumePrefix(&value, "Bearer ") ||
      !ConstantTimeEquals(value, token_)) {
    return absl::UnauthenticatedError("invalid bearer token");
  }
  return absl::OkStatus();
}

bool Security::TokenMatches(absl::string_view candidate) const {
  return token_.empty() || ConstantTimeEquals(candidate, token_);
}

}  // namespace ps
