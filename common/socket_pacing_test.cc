#include "common/socket_pacing.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/security.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

// Pacing caps, by side, of this process's TCP sockets on 127.0.0.1:port
// (the client's connection has it as peer, the server's as local address).
struct Caps {
  std::vector<uint64_t> client;
  std::vector<uint64_t> server;
};

// The port of an IPv4 or IPv6 address (gRPC makes dual-stack sockets, so
// a connection to 127.0.0.1 may be an AF_INET6 one to ::ffff:127.0.0.1);
// -1 for other families.
int PortOf(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  }
  if (a.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  }
  return -1;
}

Caps CapsOn(int port) {
  Caps caps;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return caps;
  while (dirent* e = readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2) continue;
    sockaddr_storage local{}, peer{};
    socklen_t ll = sizeof local, pl = sizeof peer;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) {
      continue;  // not a connected socket (listeners, pipes, files)
    }
    if (PortOf(peer) == port) caps.client.push_back(SocketPacingRate(fd));
    if (PortOf(local) == port) caps.server.push_back(SocketPacingRate(fd));
  }
  closedir(dir);
  return caps;
}

// A server (a generic service: no handlers needed) on 127.0.0.1:0, its
// connections paced at `server_rate`, and one call over a channel paced at
// `client_rate` once it is connected; returns the caps found on both ends.
Caps CallWithPacing(uint64_t client_rate, uint64_t server_rate) {
  std::atomic<int> accepted{0};
  grpc::CallbackGenericService generic;
  grpc::ServerBuilder builder;
  builder.RegisterCallbackGenericService(&generic);
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.SetOption(ServerPacingOption([&] {
    accepted++;
    return server_rate;
  }));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  EXPECT_NE(server, nullptr);
  EXPECT_GT(port, 0);

  Security security;
  auto channel = security.NewChannel("127.0.0.1:" + std::to_string(port),
                                     4 << 20, client_rate);
  EXPECT_TRUE(channel->WaitForConnected(std::chrono::system_clock::now() +
                                        std::chrono::seconds(20)));
  Caps caps = CapsOn(port);
  EXPECT_EQ(accepted.load(), 1) << "rate() is read once per accepted socket";
  server->Shutdown(std::chrono::system_clock::now());
  return caps;
}

TEST(SocketPacingTest, CapsBothEndsOfAConnection) {
  Caps caps = CallWithPacing(1562500, 781250);
  ASSERT_EQ(caps.client.size(), 1u);
  ASSERT_EQ(caps.server.size(), 1u);
  EXPECT_EQ(caps.client[0], 1562500u);
  EXPECT_EQ(caps.server[0], 781250u);
}

TEST(SocketPacingTest, ZeroLeavesConnectionsUncapped) {
  Caps caps = CallWithPacing(0, 0);
  ASSERT_EQ(caps.client.size(), 1u);
  ASSERT_EQ(caps.server.size(), 1u);
  EXPECT_EQ(caps.client[0], 0u);
  EXPECT_EQ(caps.server[0], 0u);
}

TEST(SocketPacingTest, LinkBytesPerSecond) {
  EXPECT_EQ(LinkBytesPerSecond(100), 12500000u);
  EXPECT_EQ(LinkBytesPerSecond(0), 0u);
}

}  // namespace
}  // namespace ps
