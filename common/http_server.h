// HttpServer: the small HTTP/1.1 server of the status page and /metrics.
// GET and HEAD of exact paths, each answered by a handler; 405 for other
// methods, 404 for unknown paths, and the parser's refusals (400, 431,
// 505; http_request.h).
//
//   HttpServer::Options options;
//   options.address = "127.0.0.1:0";
//   HttpServer::Routes routes;
//   routes["/"] = [](const HttpRequest&) {
//     return HttpResponse{200, "text/plain", "hello"};
//   };
//   PS_ASSIGN_OR_RETURN(std::unique_ptr<HttpServer> http,
//                       HttpServer::Start(options, std::move(routes)));
//   std::cout << http->address();   // "127.0.0.1:41234"
//   http.reset();                   // stops, joins its threads
//
// Hostile or idle clients cost a socket, never a thread: one thread polls
// every connection (epoll) and reads requests as they arrive; only a whole
// request reaches the `threads` that run handlers. Limits (Options):
//   - a connection that has not sent a whole request within
//     header_timeout_ms of connecting (or of its first byte after a
//     keep-alive answer) gets 408 and is closed; an idle keep-alive
//     connection is closed after idle_timeout_ms; an answer not taken by
//     the client within write_timeout_ms is dropped;
//   - past max_connections open connections, a new one gets 503 at once
//     and is closed (also when the process runs out of descriptors);
//   - a request head over max_request_bytes gets 431.
// There is no per-peer cap: scrapers behind one NAT or proxy share an
// address, and the timeouts above bound what one peer can hold.
//
// Thread-safe: handlers run on the server's handler threads, concurrently;
// they must be thread-safe and should not block for long (each holds a
// handler thread, and requests wait for a free one).
#ifndef COMMON_HTTP_SERVER_H_
#define COMMON_HTTP_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/http_request.h"

namespace ps {

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;
  using Routes = std::map<std::string, Handler>;

  struct Options {
    // "host:port"; port 0 picks a free port. Loopback by default: the pages
    // carry no authentication of their own.
    std::string address = "127.0.0.1:0";
    // The config field that named `address`, for error messages.
    std::string field = "status_address";
    // Threads running handlers (connections waiting for a request hold
    // none).
    int threads = 2;
    // See the class comment.
    int header_timeout_ms = 2000;
    int idle_timeout_ms = 10000;
    int write_timeout_ms = 10000;
    int max_request_bytes = 8192;
    int max_connections = 1024;
  };

  // Binds and starts serving. INVALID_ARGUMENT naming options.field and the
  // address when it cannot be bound (in use, not this machine's,
  // malformed).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(Options options,
                                                           Routes routes);
  // Stops accepting, waits for handlers in flight, closes every connection.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The bound "host:port".
  const std::string& address() const;

 private:
  class Loop;  // http_server.cc
  explicit HttpServer(std::unique_ptr<Loop> loop);
  std::unique_ptr<Loop> loop_;
};

// Whether the host of "host:port" is a loopback address (127.0.0.0/8,
// [::1] or "localhost").
bool IsLoopbackAddress(const std::string& host_port);

}  // namespace ps

#endif  // COMMON_HTTP_SERVER_H_
