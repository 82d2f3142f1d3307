// Raw HTTP over loopback for tests of the daemons' HTTP servers: one
// request and its whole answer, and idle connections that hold a server's
// sockets open.
//
//   std::string reply = HttpExchange(server->address(),
//                                    "GET /metrics HTTP/1.0\r\n\r\n");
//   IdleConnections idle(server->address(), 500);   // send nothing
//   EXPECT_EQ(idle.open(), 500);
#ifndef COMMON_TESTING_HTTP_TEST_CLIENT_H_
#define COMMON_TESTING_HTTP_TEST_CLIENT_H_

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace ps {

// Connects to "127.0.0.1:PORT" (the port of `address`), sends `request`
// and reads until the server closes or `timeout` passes (then returns what
// came so far). "connect failed" when the connection is refused.
std::string HttpExchange(const std::string& address, const std::string& request,
                         absl::Duration timeout = absl::Seconds(10));

// A GET of `target` with HTTP/1.0 (the server closes after answering), an
// optional Authorization header value.
std::string HttpGet(const std::string& address, const std::string& target,
                    const std::string& authorization = "",
                    absl::Duration timeout = absl::Seconds(10));

// `count` connections to `address` that send nothing; closed on
// destruction. Not thread-safe.
class IdleConnections {
 public:
  IdleConnections(const std::string& address, int count);
  ~IdleConnections();
  IdleConnections(const IdleConnections&) = delete;
  IdleConnections& operator=(const IdleConnections&) = delete;

  // How many connected.
  int open() const { return static_cast<int>(fds_.size()); }
  // How many the server has answered or closed, waiting up to `wait` for
  // all of them to be.
  int ClosedByServer(absl::Duration wait = absl::ZeroDuration()) const;

 private:
  std::vector<int> fds_;
};

}  // namespace ps

#endif  // COMMON_TESTING_HTTP_TEST_CLIENT_H_
