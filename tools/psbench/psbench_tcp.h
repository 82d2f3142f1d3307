// Raw loopback TCP throughput: the yardstick for psbench's gRPC goodput.
//
//   PS_ASSIGN_OR_RETURN(TcpResult r, SocketStream(1ull << 30, 1 << 20,
//                                                 absl::Seconds(10)));
//   double ratio = grpc_bytes_per_s / r.bytes_per_second();
//
// Both measurements move bytes one way over 127.0.0.1 with one sender and
// one receiver, so they bound what one TCP connection on this machine can
// carry; nothing leaves the loopback interface.
#ifndef TOOLS_PSBENCH_PSBENCH_TCP_H_
#define TOOLS_PSBENCH_PSBENCH_TCP_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ps {
namespace bench {

struct TcpResult {
  std::string method;  // "socket" or "iperf3"
  uint64_t bytes = 0;  // bytes received
  double seconds = 0;  // first write to last byte received
  // CPU time (user + system) of sender and receiver together: this
  // process's for the socket stream, the iperf3 processes' for iperf3.
  double cpu_seconds = 0;
  double bytes_per_second() const { return seconds > 0 ? bytes / seconds : 0; }
  double bytes_per_cpu_second() const {
    return cpu_seconds > 0 ? bytes / cpu_seconds : 0;
  }
  // CPU seconds per 1e9 bytes received; 0 when nothing was measured.
  double cpu_s_per_gb() const {
    const double b = bytes_per_cpu_second();
    return b > 0 ? 1e9 / b : 0;
  }
};

// One sender thread and one receiver thread stream `bytes` through a
// loopback connection in writes (and reads) of `write_size` bytes, cycling
// through buffers of `buffer_bytes` (rounded to whole writes; one write's
// worth when smaller: the iperf3-like cache-hot case). Stops early after
// `max_time` (the result then counts what arrived). Blocks for at most about
// max_time plus a few seconds of socket timeouts.
absl::StatusOr<TcpResult> SocketStream(uint64_t bytes, size_t write_size,
                                       absl::Duration max_time,
                                       size_t buffer_bytes = 0);

// Whether an executable `iperf3` is on PATH.
bool Iperf3Available();

// `iperf3 -s -1` and `iperf3 -c 127.0.0.1 -n bytes -l write_size -J`, both
// under coreutils `timeout` (max_time + 5 s); the receiver's byte count and
// time. NotFound when iperf3 is not on PATH; Internal (with iperf3's output)
// when it fails.
absl::StatusOr<TcpResult> Iperf3Stream(uint64_t bytes, size_t write_size,
                                       absl::Duration max_time);

}  // namespace bench
}  // namespace ps

#endif  // TOOLS_PSBENCH_PSBENCH_TCP_H_
