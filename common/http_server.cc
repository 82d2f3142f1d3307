#include "common/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace ps {
namespace {

// epoll user data of the two descriptors that are not connections.
constexpr uint64_t kListenId = 0;
constexpr uint64_t kWakeId = ~uint64_t{0};
constexpr int kEventsPerWait = 64;

std::string HostOf(const std::string& host_port) {
  std::string host = host_port.substr(0, host_port.rfind(':'));
  if (host.size() >= 2 && host.front() == '[') {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

// A non-blocking listening socket bound to `address`, and the bound port.
absl::StatusOr<std::pair<int, uint16_t>> Listen(const std::string& address,
                                                const std::string& field) {
  auto cannot = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": cannot listen on ", address, " (", why, ")"));
  };
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return cannot("not host:port");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = address.substr(colon + 1);
  if (getaddrinfo(HostOf(address).c_str(), port.c_str(), &hints, &found) != 0 ||
      found == nullptr) {
    return cannot("not an address of this machine");
  }
  const int fd =
      socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
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
  return std::make_pair(
      fd, ntohs(bound.ss_family == AF_INET6
                    ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                    : reinterpret_cast<sockaddr_in*>(&bound)->sin_port));
}

// Best effort, never blocking: a short answer to a connection about to
// be closed.
void SendNow(int fd, const HttpResponse& response) {
  const std::string bytes = FormatHttpResponse(response, true, false);
  (void)!send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

HttpResponse Text(int status, std::string body) {
  return HttpResponse{status, "text/plain; charset=utf-8", std::move(body), {}};
}

}  // namespace

// The I/O thread's event loop over every connection, and the handler
// threads. Connections live in conns_, touched by the I/O thread only;
// handler threads see a request (jobs_) and hand back bytes (done_).
//
//   accept -> kReading --whole request--> kHandling --answer--> kWriting
//               ^  |  (refusals and 404: answered at once)        |
//               |  +--timeout: 408, close                          |
//               +------------- keep-alive -------------------------+
//                                   close after -> kDraining -> closed
class HttpServer::Loop {
 public:
  Loop(Options options, Routes routes, int listen_fd, std::string address)
      : options_(std::move(options)),
        routes_(std::move(routes)),
        listen_fd_(listen_fd),
        address_(std::move(address)) {}
  ~Loop();
  absl::Status Start();
  const std::string& address() const { return address_; }

 private:
  enum class State { kReading, kHandling, kWriting, kDraining };
  struct Conn {
    int fd = -1;
    uint64_t id = 0;
    State state = State::kReading;
    bool watched = false;      // registered with epoll
    bool idle = false;         // keep-alive: nothing of a next request yet
    bool close_after = false;  // once `out` is written
    std::string in;
    std::string out;
    size_t sent = 0;
    absl::Time deadline;
  };
  struct Job {
    uint64_t id = 0;
    const Handler* handler = nullptr;
    HttpRequest request;
    bool keep_alive = false;
  };
  struct Done {
    uint64_t id = 0;
    std::string bytes;
    bool keep_alive = false;
  };

  void Run();   // the I/O thread
  void Work();  // a handler thread
  void Accept(absl::Time now);
  void OnEvent(Conn& c, uint32_t events, absl::Time now);
  void Read(Conn& c, absl::Time now);
  void Dispatch(Conn& c, absl::Time now);
  void Answer(Conn& c, std::string bytes, bool keep_alive, absl::Time now);
  void Write(Conn& c, absl::Time now);
  void TakeDone(absl::Time now);
  void Expire(absl::Time now);
  void Watch(Conn& c, uint32_t events);  // 0: not watched
  void SetDeadline(Conn& c, absl::Time deadline);
  void Close(Conn& c);

  const Options options_;
  const Routes routes_;  // read-only once started
  const int listen_fd_;
  const std::string address_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;   // eventfd: handler results, stop
  int spare_fd_ = -1;  // given up to accept-and-refuse when out of fds
  // I/O thread only.
  absl::flat_hash_map<uint64_t, std::unique_ptr<Conn>> conns_;
  uint64_t next_id_ = 1;
  absl::Time next_expiry_ = absl::InfiniteFuture();

  absl::Mutex mu_;
  absl::CondVar work_;
  std::deque<Job> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<Done> done_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread io_;
  std::vector<std::thread> workers_;
};

absl::Status HttpServer::Loop::Start() {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  epoll_event listen_event{};
  listen_event.events = EPOLLIN;
  listen_event.data.u64 = kListenId;
  epoll_event wake_event{};
  wake_event.events = EPOLLIN;
  wake_event.data.u64 = kWakeId;
  if (epoll_fd_ < 0 || wake_fd_ < 0 ||
      epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &listen_event) != 0 ||
      epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &wake_event) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(options_.field, ": cannot serve ", address_, " (",
                     std::strerror(errno), ")"));
  }
  for (int i = 0; i < std::max(1, options_.threads); ++i) {
    workers_.emplace_back([this] { Work(); });
  }
  io_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

HttpServer::Loop::~Loop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    work_.SignalAll();
  }
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  if (io_.joinable()) io_.join();
  for (std::thread& t : workers_) t.join();
  for (auto& [id, c] : conns_) close(c->fd);
  for (int fd : {listen_fd_, epoll_fd_, wake_fd_, spare_fd_}) {
    if (fd >= 0) close(fd);
  }
}

void HttpServer::Loop::Run() {
  epoll_event events[kEventsPerWait];
  while (true) {
    const absl::Time now = absl::Now();
    const int timeout_ms =
        next_expiry_ == absl::InfiniteFuture()
            ? -1
            : static_cast<int>(std::clamp<int64_t>(
                  absl::ToInt64Milliseconds(next_expiry_ - now) + 1, 0, 1000));
    const int n = epoll_wait(epoll_fd_, events, kEventsPerWait, timeout_ms);
    if (n < 0 && errno != EINTR) return;
    const absl::Time woke = absl::Now();
    for (int i = 0; i < n; ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == kListenId) {
        Accept(woke);
      } else if (id == kWakeId) {
        uint64_t count;
        (void)!read(wake_fd_, &count, sizeof(count));
        {
          absl::MutexLock lock(&mu_);
          if (stopping_) return;
        }
        TakeDone(woke);
      } else if (auto it = conns_.find(id); it != conns_.end()) {
        OnEvent(*it->second, events[i].events, woke);
      }
    }
    Expire(woke);
  }
}

void HttpServer::Loop::Work() {
  while (true) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_ && jobs_.empty()) work_.Wait(&mu_);
      if (stopping_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    const HttpResponse response = (*job.handler)(job.request);
    Done done{job.id,
              FormatHttpResponse(response, job.request.method != "HEAD",
                                 job.keep_alive),
              job.keep_alive};
    absl::MutexLock lock(&mu_);
    done_.push_back(std::move(done));
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }
}

void HttpServer::Loop::Accept(absl::Time now) {
  while (true) {
    int fd =
        accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE) && spare_fd_ >= 0) {
      // Out of descriptors: free the spare to take the connection, refuse
      // it, and keep the spare again.
      close(spare_fd_);
      fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        SendNow(fd, Text(503, "too many connections\n"));
        close(fd);
      }
      spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
      continue;
    }
    if (fd < 0) return;  // EAGAIN: all taken; other errors: next wake
    if (static_cast<int>(conns_.size()) >= options_.max_connections) {
      SendNow(fd, Text(503, "too many connections\n"));
      close(fd);
      continue;
    }
    auto conn = std::make_unique<Conn>();
    conn->fd = fd;
    conn->id = next_id_++;
    Conn& c = *conn;
    conns_.emplace(c.id, std::move(conn));
    SetDeadline(c, now + absl::Milliseconds(options_.header_timeout_ms));
    Watch(c, EPOLLIN | EPOLLRDHUP);
  }
}

void HttpServer::Loop::OnEvent(Conn& c, uint32_t events, absl::Time now) {
  if (c.state == State::kWriting) {
    if (events & (EPOLLERR | EPOLLHUP)) return Close(c);
    return Write(c, now);
  }
  Read(c, now);
}

void HttpServer::Loop::Read(Conn& c, absl::Time now) {
  char buf[4096];
  const size_t cap = static_cast<size_t>(options_.max_request_bytes) + 1;
  while (c.state == State::kDraining || c.in.size() < cap) {
    const ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
    if (n == 0) return Close(c);  // the client closed
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      return Close(c);
    }
    if (c.state == State::kDraining) continue;  // discarded
    if (c.idle) {
      c.idle = false;
      SetDeadline(c, now + absl::Milliseconds(options_.header_timeout_ms));
    }
    c.in.append(buf, static_cast<size_t>(n));
  }
  if (c.state == State::kReading) Dispatch(c, now);
}

void HttpServer::Loop::Dispatch(Conn& c, absl::Time now) {
  const size_t end = HttpHeadEnd(c.in);
  const size_t max_bytes = static_cast<size_t>(options_.max_request_bytes);
  if (end == std::string::npos && c.in.size() <= max_bytes) return;
  if (end == std::string::npos || end > max_bytes) {
    return Answer(
        c,
        FormatHttpResponse(Text(431, "request head too large\n"), true, false),
        false, now);
  }
  ParsedHttpRequest parsed =
      ParseHttpRequest(absl::string_view(c.in).substr(0, end));
  c.in.erase(0, end);
  HttpRequest& r = parsed.request;
  HttpResponse refusal;
  if (parsed.error != 0) {
    refusal = Text(parsed.error, std::move(parsed.why));
  } else if (r.method != "GET" && r.method != "HEAD") {
    refusal = Text(405, "GET only\n");
    refusal.headers.emplace_back("Allow", "GET, HEAD");
  }
  auto route = routes_.find(r.path);
  if (refusal.status == 200 && route == routes_.end()) {
    refusal = Text(404, "not found\n");
  }
  // The body of a request is never read: its connection closes after.
  const bool keep_alive =
      parsed.error == 0 && r.keep_alive && !r.has_body && refusal.status != 405;
  if (refusal.status != 200) {
    return Answer(c,
                  FormatHttpResponse(refusal, r.method != "HEAD", keep_alive),
                  keep_alive, now);
  }
  c.state = State::kHandling;
  Watch(c, 0);
  absl::MutexLock lock(&mu_);
  jobs_.push_back(Job{c.id, &route->second, std::move(r), keep_alive});
  work_.Signal();
}

void HttpServer::Loop::Answer(Conn& c, std::string bytes, bool keep_alive,
                              absl::Time now) {
  c.state = State::kWriting;
  c.out = std::move(bytes);
  c.sent = 0;
  c.close_after = !keep_alive;
  SetDeadline(c, now + absl::Milliseconds(options_.write_timeout_ms));
  Write(c, now);
}

void HttpServer::Loop::Write(Conn& c, absl::Time now) {
  while (c.sent < c.out.size()) {
    const ssize_t n =
        send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return Watch(c, EPOLLOUT);
    }
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Close(c);
    c.sent += static_cast<size_t>(n);
  }
  c.out.clear();
  if (c.close_after) {
    // Lingering close: a close with unread input would reset the
    // connection and could destroy the answer before the client reads it.
    shutdown(c.fd, SHUT_WR);
    c.state = State::kDraining;
    SetDeadline(c, now + absl::Milliseconds(options_.header_timeout_ms));
    Watch(c, EPOLLIN | EPOLLRDHUP);
    return Read(c, now);
  }
  c.state = State::kReading;
  c.idle = c.in.empty();
  SetDeadline(c, now + absl::Milliseconds(c.idle ? options_.idle_timeout_ms
                                                 : options_.header_timeout_ms));
  Watch(c, EPOLLIN | EPOLLRDHUP);
  Dispatch(c, now);  // a pipelined request may have arrived whole
}

void HttpServer::Loop::TakeDone(absl::Time now) {
  std::vector<Done> done;
  {
    absl::MutexLock lock(&mu_);
    done.swap(done_);
  }
  for (Done& d : done) {
    auto it = conns_.find(d.id);
    if (it == conns_.end()) continue;
    Answer(*it->second, std::move(d.bytes), d.keep_alive, now);
  }
}

void HttpServer::Loop::Expire(absl::Time now) {
  if (now < next_expiry_) return;
  next_expiry_ = absl::InfiniteFuture();
  std::vector<Conn*> expired;
  for (auto& [id, c] : conns_) {
    if (c->state == State::kHandling) continue;
    if (c->deadline <= now) {
      expired.push_back(c.get());
    } else {
      next_expiry_ = std::min(next_expiry_, c->deadline);
    }
  }
  for (Conn* c : expired) {
    if (c->state == State::kReading && !c->idle) {
      SendNow(c->fd, Text(408, "no whole request in time\n"));
    }
    Close(*c);
  }
}

void HttpServer::Loop::Watch(Conn& c, uint32_t events) {
  if (events == 0) {
    if (c.watched) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
    c.watched = false;
    return;
  }
  epoll_event e{};
  e.events = events;
  e.data.u64 = c.id;
  epoll_ctl(epoll_fd_, c.watched ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c.fd, &e);
  c.watched = true;
}

void HttpServer::Loop::SetDeadline(Conn& c, absl::Time deadline) {
  c.deadline = deadline;
  next_expiry_ = std::min(next_expiry_, deadline);
}

void HttpServer::Loop::Close(Conn& c) {
  close(c.fd);  // also leaves the epoll set
  conns_.erase(c.id);
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(Options options,
                                                              Routes routes) {
  absl::StatusOr<std::pair<int, uint16_t>> bound =
      Listen(options.address, options.field);
  if (!bound.ok()) return bound.status();
  std::string address =
      absl::StrCat(options.address.substr(0, options.address.rfind(':')), ":",
                   bound->second);
  auto loop = std::make_unique<Loop>(std::move(options), std::move(routes),
                                     bound->first, std::move(address));
  if (absl::Status s = loop->Start(); !s.ok()) return s;
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(loop)));
}

HttpServer::HttpServer(std::unique_ptr<Loop> loop) : loop_(std::move(loop)) {}

HttpServer::~HttpServer() = default;

const std::string& HttpServer::address() const { return loop_->address(); }

bool IsLoopbackAddress(const std::string& host_port) {
  const std::string host = HostOf(host_port);
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

}  // namespace ps
