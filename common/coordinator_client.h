// The connection to a cluster's coordinator, shared by every client that
// is not a daemon (psctl, the Python client): where the coordinator is
// (a cluster file or an address), TLS and the bearer token, and a call
// wrapper that waits for a coordinator that is still starting.
//
//   ConnectOptions o;
//   o.cluster_file = "configs/local/cluster.pbtxt";
//   PS_ASSIGN_OR_RETURN(Connection c, ConnectCoordinator(o));
//   CoordinatorClient client(c);
//   JobStatus job;
//   PS_RETURN_IF_ERROR(client.Call(&Coordinator::Stub::GetJob, req, &job));
#ifndef COMMON_COORDINATOR_CLIENT_H_
#define COMMON_COORDINATOR_CLIENT_H_

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/config.h"
#include "common/defaults.h"
#include "common/grpc_status.h"
#include "common/security.h"
#include "proto/cluster.pb.h"
#include "proto/coordinator.grpc.pb.h"

namespace ps {

// Where the coordinator is and how to reach it. At least one of
// cluster_file and coordinator must be set.
struct ConnectOptions {
  // The cluster file: shard addresses, coordinator shard, TLS and token.
  std::string cluster_file;
  // "host:port" of the coordinator; overrides the cluster file's. Alone
  // (no cluster file) it is reached in plaintext without a token unless
  // `tls` or `token` say otherwise.
  std::string coordinator;
  // Set (any file named): these TLS settings replace the cluster file's.
  TlsConfig tls;
  // Non-empty: this bearer token replaces the cluster file's.
  std::string token;
  // How long to wait for the coordinator's address and for each call's
  // coordinator to come up.
  absl::Duration timeout = absl::Seconds(kDefaultConnectTimeoutSeconds);
};

// Everything a client needs to reach the cluster.
struct Connection {
  Security security;
  std::string coordinator;
  LoadedCluster cluster;  // empty when no cluster file was loaded
  absl::Duration connect_timeout = absl::Seconds(kDefaultConnectTimeoutSeconds);
};

// Loads the cluster file (if any), the security settings and resolves the
// coordinator's address. Blocks up to `options.timeout` resolving it.
// kInvalidArgument naming the option or file for bad input; kUnavailable
// when the coordinator's address cannot be resolved in time.
absl::StatusOr<Connection> ConnectCoordinator(const ConnectOptions& options);

// Calls to the coordinator of a Connection, which it borrows (the
// Connection must outlive it). Thread-safe.
class CoordinatorClient {
 public:
  explicit CoordinatorClient(const Connection& c)
      : c_(c),
        stub_(Coordinator::NewStub(c.security.NewChannel(c.coordinator))) {}

  // One call, waiting up to the connect timeout for the coordinator to come
  // up (a daemon just started, or still resolving its shards). Blocks. An
  // answer marked NotRetryable (grpc_status.h) returns at once.
  template <typename Req, typename Resp, typename Fn>
  absl::Status Call(Fn fn, const Req& req, Resp* resp) const {
    return CallUntil(fn, req, resp, absl::Now() + c_.connect_timeout);
  }

  // As Call, with the call's own deadline (a long poll).
  template <typename Req, typename Resp, typename Fn>
  absl::Status CallUntil(Fn fn, const Req& req, Resp* resp,
                         absl::Time deadline) const {
    while (true) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(deadline));
      ctx.set_wait_for_ready(true);
      c_.security.Authorize(&ctx);
      absl::Status s = FromGrpcStatus((stub_.get()->*fn)(&ctx, req, resp));
      if (s.code() != absl::StatusCode::kUnavailable || IsNotRetryable(s) ||
          absl::Now() >= deadline)
        return s;
      std::this_thread::sleep_for(
          std::chrono::milliseconds(100));  // coordinator starting
    }
  }

  const Connection& connection() const { return c_; }

 private:
  const Connection& c_;
  std::unique_ptr<Coordinator::Stub> stub_;
};

}  // namespace ps

#endif  // COMMON_COORDINATOR_CLIENT_H_
