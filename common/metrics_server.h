// MetricsServer: the HTTP server of a daemon's Prometheus metrics. GET
// /metrics renders the Collectable at that moment (text format 0.0.4,
// prometheus-cpp's TextSerializer), so the numbers are read from the
// daemon's own statistics at scrape time and nothing is kept twice.
//
// Not prometheus-cpp's Exposer: its civetweb starts threads with a fixed
// 100 KiB stack, which glibc refuses (EINVAL) in a process whose static TLS
// is larger (workerd with OpenBLAS and cuBLASLt), and it takes 2 s to stop.
// This is the status page's HttpServer (http_server.h: one event-loop
// thread, bounded connections and timeouts) with one handler thread, and
// it stops at once.
//
//   auto collector = std::make_shared<ShardMetrics>(&shard);
//   PS_ASSIGN_OR_RETURN(std::unique_ptr<MetricsServer> metrics,
//                       MetricsServer::Start(options, collector, &security));
//   spdlog::info("metrics on http://{}/metrics", metrics->address());
//
// Security: with a cluster token, a scrape must send it as the HTTP basic
// auth password (any user name); Prometheus: `basic_auth: {username: ps,
// password_file: ...}`. There is no TLS: with the cluster's tls set, the
// server only binds loopback addresses.
//
// Thread-safe: scrapes run on the server's handler thread, one at a time;
// the Collectable must be thread-safe and must not block for long. Idle and
// slow clients are bounded as HttpServer's are.
#ifndef COMMON_METRICS_SERVER_H_
#define COMMON_METRICS_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/http_server.h"
#include "common/security.h"
#include "prometheus/collectable.h"

namespace ps {

class MetricsServer {
 public:
  struct Options {
    // "host:port" (validated by the config loader); port 0 picks one.
    std::string listen_address;
    // If set, the bound "host:port" is written here (atomically).
    std::string address_file;
  };

  // Binds, registers `collectable` at /metrics and writes address_file.
  // INVALID_ARGUMENT naming metrics_address when the port cannot be bound
  // (in use, not an address of this machine) or when TLS is on and the
  // address is not loopback; metrics_address_file when it cannot be
  // written. Keeps `collectable` alive; borrows `security`, which must
  // outlive the server.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const Options& options,
      std::shared_ptr<prometheus::Collectable> collectable,
      const Security* security);

  ~MetricsServer() = default;  // stops serving; waits for a scrape

  // "host:port" actually bound.
  const std::string& address() const { return http_->address(); }

 private:
  MetricsServer() = default;

  std::unique_ptr<HttpServer> http_;
};

}  // namespace ps

#endif  // COMMON_METRICS_SERVER_H_
