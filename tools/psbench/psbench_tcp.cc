#include "tools/psbench/psbench_tcp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "tools/psbench/psbench_util.h"

namespace ps {
namespace bench {
namespace {

// Socket calls blocked longer than this fail the measurement instead of
// hanging it (a peer that died).
constexpr int kSocketTimeoutS = 5;

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void Reset(int fd = -1) {
    if (fd_ >= 0) close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

void SetTimeouts(int fd) {
  timeval tv{kSocketTimeoutS, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

sockaddr_in Loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// A listening socket on 127.0.0.1 with a kernel-chosen port.
absl::Status Listen(Fd* fd, int* port) {
  fd->Reset(socket(AF_INET, SOCK_STREAM, 0));
  if (fd->get() < 0) return Errno("socket");
  sockaddr_in a = Loopback(0);
  if (bind(fd->get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    return Errno("bind 127.0.0.1:0");
  }
  if (listen(fd->get(), 1) != 0) return Errno("listen");
  socklen_t len = sizeof(a);
  if (getsockname(fd->get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return Errno("getsockname");
  }
  *port = ntohs(a.sin_port);
  return absl::OkStatus();
}

// The number after `"key":` following `from` in iperf3's JSON, or false.
bool JsonNumberAfter(const std::string& json, size_t from,
                     const std::string& key, double* out) {
  size_t k = json.find(absl::StrCat("\"", key, "\""), from);
  if (k == std::string::npos) return false;
  size_t colon = json.find(':', k);
  if (colon == std::string::npos) return false;
  size_t start = json.find_first_not_of(" \t\n", colon + 1);
  size_t end = json.find_first_of(",\n}", start);
  if (start == std::string::npos || end == std::string::npos) return false;
  return absl::SimpleAtod(json.substr(start, end - start), out);
}

// Runs `command` through the shell; its stdout and stderr in `*output`.
// Returns the exit status as popen/pclose report it.
int RunCapture(const std::string& command, std::string* output) {
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) output->append(buf, n);
  return pclose(p);
}

// What the receiving end of SocketStream saw.
struct Received {
  uint64_t bytes = 0;
  absl::Time last_byte = absl::InfinitePast();
  absl::Status status;
};

// Accepts one connection on `listener` and reads it to EOF in reads of
// `write_size`, cycling through a buffer of `span` bytes.
void Receive(int listener, size_t write_size, size_t span, Received* r) {
  Fd conn(accept(listener, nullptr, nullptr));
  if (conn.get() < 0) {
    r->status = Errno("accept");
    return;
  }
  SetTimeouts(conn.get());
  std::vector<char> buf(span, 0);
  size_t at = 0;
  while (true) {
    ssize_t n = read(conn.get(), buf.data() + at, write_size);
    if (n > 0) {
      r->bytes += static_cast<uint64_t>(n);
      at = (at + write_size) % span;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) r->status = Errno("read");
    break;
  }
  r->last_byte = absl::Now();
}

// Connects to 127.0.0.1:`port` and writes `bytes` (or for `max_time`) in
// writes of `write_size`, cycling through a buffer of `span` bytes; closes
// the connection on return. `*start` is when the first write began.
absl::Status Send(int port, uint64_t bytes, size_t write_size, size_t span,
                  absl::Duration max_time, absl::Time* start) {
  Fd conn(socket(AF_INET, SOCK_STREAM, 0));
  if (conn.get() < 0) return Errno("socket");
  SetTimeouts(conn.get());
  sockaddr_in a = Loopback(port);
  if (connect(conn.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    return Errno("connect");
  }
  // Payload bytes are irrelevant to the kernel's copy cost; fill anyway so
  // the pages are resident before the clock starts.
  std::vector<char> buf(span, 0x5a);
  *start = absl::Now();
  const absl::Time stop = *start + max_time;
  uint64_t sent = 0;
  size_t at = 0;
  while (sent < bytes && absl::Now() < stop) {
    size_t want =
        static_cast<size_t>(std::min<uint64_t>(write_size, bytes - sent));
    ssize_t n = write(conn.get(), buf.data() + at, want);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Errno("write");
    sent += static_cast<uint64_t>(n);
    if (static_cast<size_t>(n) == want) at = (at + write_size) % span;
  }
  return absl::OkStatus();
}

// The result of an `iperf3 -c ... -J` run from its exit status and output.
absl::StatusOr<TcpResult> ParseIperf3Client(int rc, const std::string& out) {
  size_t at = out.find("\"sum_received\"");
  double received = 0, seconds = 0;
  if (rc != 0 || at == std::string::npos ||
      !JsonNumberAfter(out, at, "bytes", &received) ||
      !JsonNumberAfter(out, at, "seconds", &seconds)) {
    return absl::InternalError(
        absl::StrCat("iperf3 -c failed (exit ", rc, "): ", out.substr(0, 500)));
  }
  TcpResult r;
  r.method = "iperf3";
  r.bytes = static_cast<uint64_t>(received);
  r.seconds = seconds;
  return r;
}

}  // namespace

absl::StatusOr<TcpResult> SocketStream(uint64_t bytes, size_t write_size,
                                       absl::Duration max_time,
                                       size_t buffer_bytes) {
  if (write_size == 0) {
    return absl::InvalidArgumentError("write_size: must be > 0");
  }
  // Writes and reads walk through buffers of this size (a multiple of
  // write_size): one write's worth stays cache-hot, a tensor's worth does not.
  const size_t span =
      std::max<size_t>(1, buffer_bytes / write_size) * write_size;
  Fd listener;
  int port = 0;
  PS_RETURN_IF_ERROR(Listen(&listener, &port));

  const double cpu0 = CpuSeconds();
  Received received;
  std::thread receiver(
      [&] { Receive(listener.get(), write_size, span, &received); });
  absl::Time start = absl::Now();
  // Returning closes the connection: EOF for the receiver.
  absl::Status send_status =
      Send(port, bytes, write_size, span, max_time, &start);
  if (!send_status.ok()) {
    // A receiver still in accept() would wait for its socket timeout; a
    // shutdown of the listener wakes it at once.
    shutdown(listener.get(), SHUT_RDWR);
  }
  receiver.join();
  PS_RETURN_IF_ERROR(send_status);
  PS_RETURN_IF_ERROR(received.status);
  TcpResult r;
  r.method = "socket";
  r.bytes = received.bytes;
  r.seconds = absl::ToDoubleSeconds(received.last_byte - start);
  r.cpu_seconds = CpuSeconds() - cpu0;
  return r;
}

bool Iperf3Available() {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    std::string exe = absl::StrCat(dir, "/iperf3");
    if (access(exe.c_str(), X_OK) == 0) return true;
  }
  return false;
}

absl::StatusOr<TcpResult> Iperf3Stream(uint64_t bytes, size_t write_size,
                                       absl::Duration max_time) {
  if (!Iperf3Available()) return absl::NotFoundError("iperf3 is not on PATH");
  // A free port: bound and released at once (iperf3 binds it right after).
  int port = 0;
  {
    Fd probe;
    PS_RETURN_IF_ERROR(Listen(&probe, &port));
  }
  const int64_t limit_s = absl::ToInt64Seconds(max_time) + 5;
  const double cpu0 = CpuSeconds(/*children=*/true);
  std::string server_cmd = absl::StrCat(
      "timeout ", limit_s, " iperf3 -s -1 --forceflush -B 127.0.0.1 -p ", port,
      " 2>&1");
  FILE* server = popen(server_cmd.c_str(), "r");
  if (server == nullptr) return Errno("popen iperf3 -s");
  // The client may connect once the server says it listens.
  std::string server_out;
  char line[512];
  bool listening = false;
  while (fgets(line, sizeof(line), server) != nullptr) {
    server_out += line;
    if (std::strstr(line, "Server listening") != nullptr) {
      listening = true;
      break;
    }
  }
  std::string client_out;
  int client_rc = -1;
  if (listening) {
    client_rc =
        RunCapture(absl::StrCat("timeout ", limit_s, " iperf3 -c 127.0.0.1 -p ",
                                port, " -n ", bytes, " -l ", write_size, " -J"),
                   &client_out);
  }
  // Drains the server's remaining output so it can exit (-1: after one test).
  while (fgets(line, sizeof(line), server) != nullptr) server_out += line;
  pclose(server);
  if (!listening) {
    return absl::InternalError(
        absl::StrCat("iperf3 -s did not start: ", server_out));
  }
  PS_ASSIGN_OR_RETURN(TcpResult r, ParseIperf3Client(client_rc, client_out));
  r.cpu_seconds = CpuSeconds(/*children=*/true) - cpu0;
  return r;
}

}  // namespace bench
}  // namespace ps
