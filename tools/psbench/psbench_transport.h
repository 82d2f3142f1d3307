// psbench's transport mode: W client threads (each its own PsClient and rank)
// PushPull a tensor of S bytes against the shards in ASP and/or BSP;
// goodput (bytes pushed + pulled per second), per-step latency p50/p99,
// next to raw loopback TCP moving the same bytes.
//
//   PS_ASSIGN_OR_RETURN(auto cluster, BenchCluster::StartInProcess(2));
//   TransportOptions options;
//   options.sizes = {1 << 20};
//   PS_ASSIGN_OR_RETURN(TransportReport r, RunTransport(*cluster, options));
//   std::cout << FormatTransport(r);
//
// Every run is bounded in time by its options; traffic goes only to the
// shards' addresses and 127.0.0.1.
#ifndef TOOLS_PSBENCH_PSBENCH_TRANSPORT_H_
#define TOOLS_PSBENCH_PSBENCH_TRANSPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/job.pb.h"
#include "tools/psbench/psbench_cluster.h"
#include "tools/psbench/psbench_tcp.h"
#include "worker/client/ps_client.h"

namespace ps {
namespace bench {

struct TransportOptions {
  std::vector<uint64_t> sizes = {4 << 10, 64 << 10, 1 << 20,
                                 4 << 20, 16 << 20, 64 << 20};
  std::vector<ConsistencyMode> modes = {ASP, BSP};
  int clients = 2;
  // Measured time per (mode, size), after one warm-up step.
  absl::Duration duration = absl::Seconds(3);
  // Steps per client per point at most (bounds the small sizes).
  uint64_t max_steps = 1000000;
  uint64_t partition_bytes = 1 << 20;
  PsClientOptions client;
  // Raw TCP reference: iperf3 when on PATH (and allowed), the socket stream
  // always (unless measure_tcp is off, e.g. while profiling the gRPC path
  // alone); writes of tcp_write_size bytes.
  bool measure_tcp = true;
  bool use_iperf3 = true;
  size_t tcp_write_size = 1 << 20;
  // The socket stream's buffers: 0 = one write (cache-hot, like iperf3);
  // a tensor's size makes the kernel copy from and to memory that is not
  // in cache, as the gRPC path does.
  size_t tcp_buffer_bytes = 0;
};

struct TransportPoint {
  ConsistencyMode mode = ASP;
  uint64_t bytes = 0;  // tensor size
  int clients = 0;
  uint64_t steps = 0;  // over all clients
  uint64_t errors = 0;
  std::string first_error;
  double seconds = 0;
  double goodput = 0;  // bytes pushed + pulled per second
  double p50_us = 0, p99_us = 0;
  // CPU time of the clients and the shards during the point (this process,
  // plus the psd processes of a running cluster when visible): bytes moved
  // per CPU-second is the efficiency that machine load distorts least.
  double cpu_seconds = 0;
  double bytes_per_cpu_second() const {
    return cpu_seconds > 0 ? 2.0 * bytes * steps / cpu_seconds : 0;
  }
  // CPU seconds per 1e9 bytes pushed + pulled (the inverse of the above,
  // scaled); 0 when nothing moved.
  double cpu_s_per_gb() const {
    const double b = bytes_per_cpu_second();
    return b > 0 ? 1e9 / b : 0;
  }
  // Raw TCP moving the same bytes, right after this point.
  TcpResult socket;
  TcpResult iperf3;  // bytes == 0 when not measured
  // goodput / TransportReport::reference_bytes_per_s.
  double ratio = 0;
  // bytes per CPU-second / the socket stream's (both in this process).
  double cpu_ratio = 0;
  // cpu_s_per_gb() / the socket stream's: how many times a raw TCP stream's
  // CPU per byte the point costs (1 / cpu_ratio; issue 26's target <= 1.5);
  // 0 when either was not measured.
  double cpu_vs_tcp() const {
    const double tcp = socket.cpu_s_per_gb();
    return tcp > 0 ? cpu_s_per_gb() / tcp : 0;
  }
};

struct TransportReport {
  int shards = 0;
  bool in_process = true;
  // Whose CPU time TransportPoint.cpu_seconds counts.
  std::string cpu_scope;
  std::vector<TransportPoint> points;
  // The limit every ratio divides by: the fastest raw TCP stream of the
  // run (socket or iperf3, any point). Loopback TCP on this 2-core VM is
  // bimodal (about 1.5 or 3.5-4 GB/s, depending on where the scheduler puts
  // the two ends), so a point's own stream could flatter the ratio 2x.
  double reference_bytes_per_s = 0;
};

// Runs every (mode, size) point: registers a job, runs the clients, drops
// the job, measures raw TCP. Errors of individual steps are counted (the
// point stops at the first one); setup failures return an error.
absl::StatusOr<TransportReport> RunTransport(const BenchCluster& cluster,
                                             const TransportOptions& options);

// A human-readable table, and one JSON object (no newline), of the report.
std::string FormatTransport(const TransportReport& r);
std::string TransportJson(const TransportReport& r);

}  // namespace bench
}  // namespace ps

#endif  // TOOLS_PSBENCH_PSBENCH_TRANSPORT_H_
