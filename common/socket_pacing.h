// Caps the send rate of every TCP connection gRPC opens or accepts, with
// the kernel's own TCP pacing (SO_MAX_PACING_RATE; since Linux 4.13 it
// needs no fq qdisc). Issue 26: with W workers and S shards each on its own
// host, every worker splits its link over S flows and every shard its link
// over W flows. TCP (BBR or CUBIC through FIFO switch queues) shares a link
// among its flows unevenly, and BSP pays for the slowest flow into each
// shard: a chunk is answered only when every worker's part is in. Pacing
// each flow at exactly its share of the sender's link keeps the flows even
// (docs/SCALING.md, "Paced flows").
//
// Client side (a channel's connection):
//   grpc::ChannelArguments args;
//   SetClientPacing(bytes_per_s, &args);   // 0: no cap (the default)
// Server side (every accepted connection; `rate` is read at each accept):
//   builder.SetOption(ServerPacingOption([&] { return link / peers; }));
#ifndef COMMON_SOCKET_PACING_H_
#define COMMON_SOCKET_PACING_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "grpcpp/server_builder.h"
#include "grpcpp/support/channel_arguments.h"

namespace ps {

// Bytes per second of a link given in Mbit/s (1 Mbit = 10^6 bits).
constexpr uint64_t LinkBytesPerSecond(uint64_t mbit) { return mbit * 125000; }

// Every connection of channels made with `args` is paced at `bytes_per_s`
// (bytes of TCP segments per second). 0 leaves `args` unchanged.
void SetClientPacing(uint64_t bytes_per_s, grpc::ChannelArguments* args);

// A server option pacing each accepted connection at rate() bytes per
// second, read when the connection is accepted (0: that one is not capped).
// `rate` must be thread-safe and outlive the server.
std::unique_ptr<grpc::ServerBuilderOption> ServerPacingOption(
    std::function<uint64_t()> rate);

// The cap on `fd` (SO_MAX_PACING_RATE), or 0 when it has none (the
// kernel's ~0 "unlimited") or is not a socket. For tests and logs.
uint64_t SocketPacingRate(int fd);

}  // namespace ps

#endif  // COMMON_SOCKET_PACING_H_
