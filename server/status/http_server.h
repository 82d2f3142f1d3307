// HttpServer: a small, bounded HTTP/1.1 server for GET pages (the
// coordinator's status page), over civetweb (Debian's libcivetweb-dev).
// Each request is answered by a handler looked up by exact path; anything
// but GET or HEAD gets 405, an unknown path 404. Requests are bounded in
// size and time, connections are closed after each answer, and a fixed
// pool of threads serves them, so a slow or hostile client ties up one
// thread for at most request_timeout_ms.
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
#ifndef SERVER_STATUS_HTTP_SERVER_H_
#define SERVER_STATUS_HTTP_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

struct mg_context;
struct mg_connection;

namespace ps {

struct HttpRequest {
  std::string path;   // "/api/history"
  std::string query;  // "job=job-000001" ("" when none)
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// The value of `name` in a query string "a=1&b=2" ("" when absent). Values
// are returned as sent (no percent-decoding): callers accept only plain
// characters.
std::string QueryValue(const std::string& query, const std::string& name);

// Thread-safe: handlers run on the server's threads, concurrently; they
// must not block for long (each holds one of `threads`).
class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;
  using Routes = std::map<std::string, Handler>;

  struct Options {
    // "host:port"; port 0 picks a free port. Loopback by default: the pages
    // carry no authentication.
    std::string address = "127.0.0.1:0";
    // Threads serving requests (each one connection at a time).
    int threads = 2;
    // A request that has not arrived whole by then is dropped.
    int request_timeout_ms = 5000;
    // Request line plus headers; larger requests are refused.
    int max_request_bytes = 8192;
  };

  // Binds and starts serving. INVALID_ARGUMENT naming the address when it
  // cannot be bound (in use, not this machine's, malformed).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(Options options,
                                                           Routes routes);
  // Stops accepting, waits for requests in flight, joins the threads.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The bound "host:port".
  const std::string& address() const { return address_; }

 private:
  explicit HttpServer(Routes routes) : routes_(std::move(routes)) {}
  static int Dispatch(mg_connection* conn, void* self);

  const Routes routes_;  // read-only once started
  mg_context* ctx_ = nullptr;
  std::string address_;
};

}  // namespace ps

#endif  // SERVER_STATUS_HTTP_SERVER_H_
