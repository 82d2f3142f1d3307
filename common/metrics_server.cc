#include "common/metrics_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/text_proto.h"
#include "prometheus/text_serializer.h"

namespace ps {
namespace {

// A request head larger than this is refused (a scrape's is ~200 bytes).
constexpr size_t kMaxRequestBytes = 8192;
// A client that sends or reads nothing for this long is dropped.
constexpr int kClientTimeoutSeconds = 5;

std::string HostOf(const std::string& host_port) {
  std::string host = host_port.substr(0, host_port.rfind(':'));
  if (host.size() >= 2 && host.front() == '[') {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

void WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n =
        send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return;  // the client went away or timed out
    done += static_cast<size_t>(n);
  }
}

std::string Response(const std::string& status, const std::string& body,
                     const std::string& extra_headers = "") {
  return absl::StrCat("HTTP/1.1 ", status,
                      "\r\nContent-Type: text/plain; version=0.0.4; "
                      "charset=utf-8\r\nContent-Length: ",
                      body.size(), "\r\nConnection: close\r\n", extra_headers,
                      "\r\n", body);
}

// The password of an "Authorization: Basic base64(user:password)" header
// in `head` ("" when there is none).
std::string BasicAuthPassword(absl::string_view head) {
  for (absl::string_view line : absl::StrSplit(head, "\r\n")) {
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos ||
        !absl::EqualsIgnoreCase(line.substr(0, colon), "authorization")) {
      continue;
    }
    absl::string_view value =
        absl::StripAsciiWhitespace(line.substr(colon + 1));
    if (!absl::ConsumePrefix(&value, "Basic ")) return "";
    std::string decoded;
    if (!absl::Base64Unescape(value, &decoded)) return "";
    const size_t sep = decoded.find(':');
    return sep == std::string::npos ? "" : decoded.substr(sep + 1);
  }
  return "";
}

}  // namespace

bool IsLoopbackAddress(const std::string& host_port) {
  const std::string host = HostOf(host_port);
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const Options& options,
    std::shared_ptr<prometheus::Collectable> collectable,
    const Security* security) {
  const std::string& address = options.listen_address;
  if (security->tls() && !IsLoopbackAddress(address)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics_address: ", address,
        ": /metrics is plain HTTP and the cluster uses TLS; bind it to a "
        "loopback address (127.0.0.1) and scrape through a TLS proxy"));
  }
  auto cannot = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics_address: cannot listen on ", address, " (", why, ")"));
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = address.substr(address.rfind(':') + 1);
  if (getaddrinfo(HostOf(address).c_str(), port.c_str(), &hints, &found) != 0 ||
      found == nullptr) {
    return cannot("not an address of this machine");
  }
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  bool ok = fd >= 0 &&
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
            bind(fd, found->ai_addr, found->ai_addrlen) == 0 &&
            listen(fd, SOMAXCONN) == 0;
  const int bind_errno = errno;
  freeaddrinfo(found);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ok = ok && getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0;
  if (!ok) {
    if (fd >= 0) close(fd);
    return cannot(bind_errno == EADDRINUSE
                      ? "in use"
                      : absl::StrCat("not an address of this machine: ",
                                     std::strerror(bind_errno)));
  }
  const uint16_t bound_port =
      ntohs(bound.ss_family == AF_INET6
                ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->listen_fd_ = fd;
  server->collectable_ = std::move(collectable);
  server->security_ = security;
  server->address_ =
      absl::StrCat(address.substr(0, address.rfind(':')), ":", bound_port);
  if (pipe2(server->wake_, O_CLOEXEC) != 0) {
    return cannot(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  if (!options.address_file.empty()) {
    absl::Status w =
        WriteFileAtomically(options.address_file, server->address_ + "\n");
    if (!w.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("metrics_address_file: ", w.message()));
    }
  }
  MetricsServer* s = server.get();
  server->thread_ = std::thread([s] { s->Serve(); });
  return server;
}

MetricsServer::~MetricsServer() {
  if (thread_.joinable()) {
    const char byte = 0;
    (void)!write(wake_[1], &byte, 1);
    thread_.join();
  }
  for (int fd : {listen_fd_, wake_[0], wake_[1]}) {
    if (fd >= 0) close(fd);
  }
}

void MetricsServer::Serve() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;  // the destructor
    const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    timeval timeout{kClientTimeoutSeconds, 0};
    setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    Answer(client);
    close(client);
  }
}

void MetricsServer::Answer(int client) {
  std::string head;
  char buf[2048];
  while (head.find("\r\n\r\n") == std::string::npos) {
    if (head.size() > kMaxRequestBytes) {
      return WriteAll(client, Response("431 Request Header Fields Too Large",
                                       "request head too large\n"));
    }
    const ssize_t n = recv(client, buf, sizeof(buf), 0);
    if (n <= 0) return;  // closed or timed out
    head.append(buf, static_cast<size_t>(n));
  }
  const std::vector<absl::string_view> request_line =
      absl::StrSplit(absl::string_view(head).substr(0, head.find("\r\n")), ' ');
  if (request_line.size() != 3 || request_line[0] != "GET") {
    return WriteAll(client, Response("405 Method Not Allowed",
                                     "only GET /metrics\n", "Allow: GET\r\n"));
  }
  absl::string_view path = request_line[1];
  path = path.substr(0, path.find('?'));
  if (path != "/metrics") {
    return WriteAll(client, Response("404 Not Found", "try /metrics\n"));
  }
  if (security_->has_token() &&
      !security_->TokenMatches(BasicAuthPassword(head))) {
    return WriteAll(client,
                    Response("401 Unauthorized",
                             "the cluster token is the basic-auth password\n",
                             "WWW-Authenticate: Basic realm=\"ps\"\r\n"));
  }
  WriteAll(client, Response("200 OK", prometheus::TextSerializer().Serialize(
                                          collectable_->Collect())));
}

}  // namespace ps
