#include "common/testing/http_test_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace ps {
namespace {

// A connected socket to 127.0.0.1 at the port of `address`, or -1.
int Connect(const std::string& address) {
  int port = 0;
  if (!absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port)) {
    return -1;
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 &&
      connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

std::string HttpExchange(const std::string& address, const std::string& request,
                         absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const int fd = Connect(address);
  if (fd < 0) return "connect failed";
  (void)!send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string answer;
  char buf[4096];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0 || poll(&p, 1, static_cast<int>(left_ms)) <= 0) break;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    answer.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return answer;
}

std::string HttpGet(const std::string& address, const std::string& target,
                    const std::string& authorization, absl::Duration timeout) {
  std::string request = absl::StrCat("GET ", target, " HTTP/1.0\r\n");
  if (!authorization.empty()) {
    absl::StrAppend(&request, "Authorization: ", authorization, "\r\n");
  }
  return HttpExchange(address, request + "\r\n", timeout);
}

IdleConnections::IdleConnections(const std::string& address, int count) {
  for (int i = 0; i < count; ++i) {
    const int fd = Connect(address);
    if (fd >= 0) fds_.push_back(fd);
  }
}

IdleConnections::~IdleConnections() {
  for (int fd : fds_) close(fd);
}

int IdleConnections::ClosedByServer(absl::Duration wait) const {
  const absl::Time deadline = absl::Now() + wait;
  std::vector<pollfd> fds;
  for (int fd : fds_) fds.push_back(pollfd{fd, POLLIN, 0});
  while (true) {
    const int64_t left_ms =
        std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
    // Readable: the server answered (a 408) or closed it.
    const int ready = poll(fds.data(), fds.size(), 0) < 0 ? 0 : [&] {
      int n = 0;
      for (const pollfd& p : fds) n += (p.revents != 0);
      return n;
    }();
    if (ready == static_cast<int>(fds.size()) || left_ms == 0) return ready;
    // Wait for any change on a socket not yet readable.
    std::vector<pollfd> waiting;
    for (const pollfd& p : fds) {
      if (p.revents == 0) waiting.push_back(pollfd{p.fd, POLLIN, 0});
    }
    poll(waiting.data(), waiting.size(),
         static_cast<int>(std::min<int64_t>(left_ms, 1000)));
  }
}

}  // namespace ps
