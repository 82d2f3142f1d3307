// psbench's three measurements, as a library (tools/psbench.cc is the
// flag-parsing main):
//
//   transport  W client threads (each its own PsClient and rank) PushPull a
//              tensor of S bytes against the shards in ASP and/or BSP;
//              goodput (bytes pushed + pulled per second), per-step latency
//              p50/p99, next to raw loopback TCP moving the same bytes.
//   apply      the shard's optimizer update rate for each optimizer and
//              size, next to memcpy of the same bytes.
//   load       many concurrent clients PushPull for a while: errors, p99
//              latency, resident-memory growth of the shard processes.
//
//   PS_ASSIGN_OR_RETURN(auto cluster, BenchCluster::StartInProcess(2));
//   TransportOptions options;
//   options.sizes = {1 << 20};
//   PS_ASSIGN_OR_RETURN(TransportReport r, RunTransport(cluster.get(),
//   options)); std::cout << FormatTransport(r);
//
// Every run is bounded in time by its options; traffic goes only to the
// shards' addresses and 127.0.0.1.
#ifndef TOOLS_PSBENCH_LIB_H_
#define TOOLS_PSBENCH_LIB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/job.pb.h"
#include "tools/psbench_cluster.h"
#include "tools/psbench_tcp.h"
#include "worker/ps_client.h"

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
  // Raw TCP moving the same bytes, right after this point.
  TcpResult socket;
  TcpResult iperf3;  // bytes == 0 when not measured
  // goodput / TransportReport::reference_bytes_per_s.
  double ratio = 0;
  // bytes per CPU-second / the socket stream's (both in this process).
  double cpu_ratio = 0;
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

struct ApplyOptions {
  std::vector<uint64_t> floats = {1 << 20, 4 << 20, 16 << 20, 64 << 20};
  // Each measurement repeats for at least this long and min_iterations.
  absl::Duration min_time = absl::Milliseconds(300);
  int min_iterations = 3;
};

struct ApplyPoint {
  std::string
      optimizer;  // "sgd", "momentum", "nesterov", "adagrad", "adam", "adamw"
  uint64_t floats = 0;
  double seconds_per_apply = 0;
  double floats_per_second = 0;
  // Bytes the update must stream (read + write) per second; see
  // server/apply_benchmark.cc for the per-float counts.
  double touched_bytes_per_second = 0;
  double memcpy_seconds = 0;           // memcpy of floats * 4 bytes
  double memcpy_bytes_per_second = 0;  // read + write: 8 bytes per float
  double ratio_to_memcpy = 0;          // memcpy_seconds / seconds_per_apply
};

struct ApplyReport {
  std::vector<ApplyPoint> points;
};

// Measures Optimizer::Apply for SGD, SGD+momentum, Nesterov, Adagrad, Adam
// and AdamW on N(0, 0.01) gradients (and the BSP gradient sum, "sum"), with
// memcpy of the same bytes measured between them.
absl::StatusOr<ApplyReport> RunApply(const ApplyOptions& options);

struct LoadOptions {
  int clients = 64;
  absl::Duration duration = absl::Seconds(60);
  absl::Duration warmup = absl::Seconds(5);
  uint64_t bytes = 256 << 10;  // tensor size
  ConsistencyMode mode = ASP;
  uint64_t partition_bytes = 64 << 10;
  PsClientOptions client;
  double max_rss_growth = 0.10;
};

struct LoadReport {
  int clients = 0;
  uint64_t steps = 0;
  uint64_t errors = 0;
  std::string first_error;
  double seconds = 0;
  double steps_per_second = 0;
  double p50_us = 0, p99_us = 0, max_us = 0;
  // After warm-up, and at the end with the clients still running.
  uint64_t rss_start = 0, rss_end = 0;
  double rss_growth = 0;   // rss_end / rss_start - 1
  std::string rss_source;  // "self" or "psd pids ..."
  bool pass = false;       // errors == 0 and rss_growth < max_rss_growth
};

absl::StatusOr<LoadReport> RunLoad(const BenchCluster& cluster,
                                   const LoadOptions& options);

// Human-readable tables and one-object JSON of each report.
std::string FormatTransport(const TransportReport& r);
std::string TransportJson(const TransportReport& r);
std::string FormatApply(const ApplyReport& r);
std::string ApplyJson(const ApplyReport& r);
std::string FormatLoad(const LoadReport& r);
std::string LoadJson(const LoadReport& r);

}  // namespace bench
}  // namespace ps

#endif  // TOOLS_PSBENCH_LIB_H_
