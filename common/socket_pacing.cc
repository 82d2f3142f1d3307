#include "common/socket_pacing.h"

#include <sys/socket.h>

#include <cerrno>
#include <utility>

#include "grpc/support/sync.h"
#include "spdlog/spdlog.h"

// gRPC's socket mutator: a pointer channel argument (GRPC_ARG_SOCKET_MUTATOR)
// whose mutate_fd_2 gRPC calls on each socket it creates or accepts, before
// use. grpc::ChannelArguments::SetSocketMutator is public API; the struct
// layout is gRPC's src/core/lib/iomgr/socket_mutator.h, which Debian's
// libgrpc++-dev does not install. It is declared here as gRPC 1.51 (the
// version third_party/ pins) defines it; grpc_socket_mutator_init is an
// exported C++ symbol of libgrpc.so.
typedef enum {
  GRPC_FD_CLIENT_CONNECTION_USAGE,
  GRPC_FD_SERVER_LISTENER_USAGE,
  GRPC_FD_SERVER_CONNECTION_USAGE,
} grpc_fd_usage;

typedef struct {
  int fd;
  grpc_fd_usage usage;
} grpc_mutate_socket_info;

struct grpc_socket_mutator_vtable {
  bool (*mutate_fd)(int fd, grpc_socket_mutator* mutator);
  int (*compare)(grpc_socket_mutator* a, grpc_socket_mutator* b);
  void (*destroy)(grpc_socket_mutator* mutator);
  bool (*mutate_fd_2)(const grpc_mutate_socket_info* info,
                      grpc_socket_mutator* mutator);
};

struct grpc_socket_mutator {
  const grpc_socket_mutator_vtable* vtable;
  gpr_refcount refcount;
};

void grpc_socket_mutator_init(grpc_socket_mutator* mutator,
                              const grpc_socket_mutator_vtable* vtable);

namespace ps {
namespace {

// One mutator per channel-argument set or server; gRPC owns it once it is
// in the arguments (refcounted, destroyed through the vtable).
struct PacingMutator : grpc_socket_mutator {
  PacingMutator(grpc_fd_usage usage, std::function<uint64_t()> rate)
      : usage(usage), rate(std::move(rate)) {
    grpc_socket_mutator_init(this, &kVtable);
  }

  bool Mutate(const grpc_mutate_socket_info& info) const {
    if (info.usage != usage) return true;
    const uint64_t bytes_per_s = rate();
    if (bytes_per_s == 0) return true;
    if (setsockopt(info.fd, SOL_SOCKET, SO_MAX_PACING_RATE, &bytes_per_s,
                   sizeof bytes_per_s) != 0) {
      // Not fatal: the connection works unpaced (a kernel without TCP
      // pacing, or a socket type that has none).
      spdlog::warn("SO_MAX_PACING_RATE {} on fd {} failed: errno {}",
                   bytes_per_s, info.fd, errno);
    }
    return true;
  }

  static const grpc_socket_mutator_vtable kVtable;
  const grpc_fd_usage usage;
  const std::function<uint64_t()> rate;
};

const grpc_socket_mutator_vtable PacingMutator::kVtable = {
    /*mutate_fd=*/nullptr,
    /*compare=*/
    [](grpc_socket_mutator* a, grpc_socket_mutator* b) {
      return a < b ? -1 : (a > b ? 1 : 0);
    },
    /*destroy=*/
    [](grpc_socket_mutator* m) { delete static_cast<PacingMutator*>(m); },
    /*mutate_fd_2=*/
    [](const grpc_mutate_socket_info* info, grpc_socket_mutator* m) {
      return static_cast<PacingMutator*>(m)->Mutate(*info);
    },
};

class PacingOption final : public grpc::ServerBuilderOption {
 public:
  explicit PacingOption(std::function<uint64_t()> rate)
      : rate_(std::move(rate)) {}
  void UpdateArguments(grpc::ChannelArguments* args) override {
    args->SetSocketMutator(
        new PacingMutator(GRPC_FD_SERVER_CONNECTION_USAGE, rate_));
  }
  void UpdatePlugins(
      std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>*) override {}

 private:
  std::function<uint64_t()> rate_;
};

}  // namespace

void SetClientPacing(uint64_t bytes_per_s, grpc::ChannelArguments* args) {
  if (bytes_per_s == 0) return;
  args->SetSocketMutator(new PacingMutator(
      GRPC_FD_CLIENT_CONNECTION_USAGE, [bytes_per_s] { return bytes_per_s; }));
}

std::unique_ptr<grpc::ServerBuilderOption> ServerPacingOption(
    std::function<uint64_t()> rate) {
  return std::make_unique<PacingOption>(std::move(rate));
}

uint64_t SocketPacingRate(int fd) {
  uint64_t rate = 0;
  socklen_t len = sizeof rate;
  if (getsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &rate, &len) != 0) {
    return 0;
  }
  if (len == sizeof(uint32_t)) rate &= 0xffffffffu;
  return rate == ~uint64_t{0} || rate == 0xffffffffu ? 0 : rate;
}

}  // namespace ps
