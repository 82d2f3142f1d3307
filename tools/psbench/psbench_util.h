// Small measurement helpers for psbench: percentiles, seeded payloads,
// resident memory of a process, and which local process listens on a port.
//
//   std::vector<float> grad = NormalFloats(n, /*seed=*/7, /*stddev=*/0.01f);
//   double p99 = Percentile(latencies_us, 0.99);
//   PS_ASSIGN_OR_RETURN(uint64_t rss, ResidentBytes(getpid()));
#ifndef TOOLS_PSBENCH_PSBENCH_UTIL_H_
#define TOOLS_PSBENCH_PSBENCH_UTIL_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ps {
namespace bench {

// Nearest-rank percentile (q in [0, 1]) of `values`; 0 when empty. Sorts a
// copy, so the caller's order is kept.
double Percentile(std::vector<double> values, double q);

// `n` floats drawn from N(0, stddev^2) with a generator seeded by `seed`:
// realistic gradient magnitudes, never denormal for stddev >= 1e-6 (a value
// that would fall below 1e-30 in magnitude is replaced by stddev). The same
// (n, seed, stddev) always gives the same values on one platform.
std::vector<float> NormalFloats(size_t n, uint64_t seed, float stddev);

// VmRSS of process `pid` in bytes, from /proc/PID/status. NotFound when the
// process is gone; FailedPrecondition when the line is missing.
absl::StatusOr<uint64_t> ResidentBytes(pid_t pid);

// The id of the local process that has a TCP socket listening on 127.0.0.1
// (or any address) at `port`: /proc/net/tcp{,6} gives the socket's inode,
// /proc/*/fd the process holding it. NotFound when none is visible (another
// user's process without privileges, or nothing listens there).
absl::StatusOr<pid_t> ListeningPid(int port);

// The port of "host:port" (IPv6 hosts in brackets); InvalidArgument naming
// `address` otherwise.
absl::StatusOr<int> PortOf(const std::string& address);

// CPU time (user + system) used so far by this process (`children` false)
// or by its waited-for children (true), in seconds.
double CpuSeconds(bool children = false);

// CPU time (user + system) used so far by process `pid`, from
// /proc/PID/stat. NotFound when the process is gone.
absl::StatusOr<double> ProcessCpuSeconds(pid_t pid);

// Seconds in `d` as a double.
inline double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

}  // namespace bench
}  // namespace ps

#endif  // TOOLS_PSBENCH_PSBENCH_UTIL_H_
