#include "tools/psbench/psbench_transport.h"

#include <unistd.h>

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/json_string.h"
#include "common/status_macros.h"
#include "tools/psbench/psbench_clients.h"
#include "tools/psbench/psbench_util.h"

namespace ps {
namespace bench {
namespace {

std::string ModeName(ConsistencyMode m) {
  switch (m) {
    case ASP:
      return "asp";
    case BSP:
      return "bsp";
    case SSP:
      return "ssp";
    default:
      return "unspecified";
  }
}

std::string Bytes(double b) {
  if (b >= (1 << 20) && static_cast<uint64_t>(b) % (1 << 20) == 0) {
    return absl::StrCat(static_cast<uint64_t>(b) >> 20, " MiB");
  }
  if (b >= 1024 && static_cast<uint64_t>(b) % 1024 == 0) {
    return absl::StrCat(static_cast<uint64_t>(b) >> 10, " KiB");
  }
  return absl::StrCat(static_cast<uint64_t>(b), " B");
}

// Registers the point's job, runs the clients and drops the job.
absl::StatusOr<TransportPoint> MeasurePoint(const BenchCluster& cluster,
                                            const TransportOptions& options,
                                            ConsistencyMode mode, uint64_t size,
                                            const CpuMeter& cpu) {
  BenchJob job;
  job.job_id =
      absl::StrCat("psbench-", getpid(), "-", ModeName(mode), "-", size);
  job.floats = size / 4;
  job.mode = mode;
  job.workers = static_cast<uint32_t>(options.clients);
  job.partition_bytes = options.partition_bytes;
  PS_ASSIGN_OR_RETURN(Assignment a, cluster.RegisterJob(job));
  ClientPhases phases;
  phases.warmup = absl::ZeroDuration();
  phases.measure = options.duration;
  phases.max_steps = options.max_steps;
  double cpu0 = 0;
  absl::StatusOr<ClientRun> run = RunClients(
      cluster, a, options.clients, options.client, phases,
      [&] { cpu0 = cpu.Now(); }, nullptr);
  const double cpu_seconds = cpu.Now() - cpu0;
  absl::Status dropped = cluster.DropJob(job.job_id);
  if (!run.ok()) return run.status();
  PS_RETURN_IF_ERROR(dropped);

  TransportPoint p;
  p.mode = mode;
  p.bytes = size;
  p.clients = options.clients;
  p.steps = run->steps;
  p.errors = run->errors;
  p.first_error = run->first_error;
  p.seconds = run->seconds;
  const uint64_t moved = 2 * size * run->steps;
  p.goodput = p.seconds > 0 ? moved / p.seconds : 0;
  p.p50_us = Percentile(run->latencies_us, 0.50);
  p.p99_us = Percentile(run->latencies_us, 0.99);
  p.cpu_seconds = cpu_seconds;
  return p;
}

// The same bytes as `p` moved, over raw TCP: at least 1 GiB, since a
// shorter stream is over in tens of ms, and its rate varied 1.2-3.7 GB/s
// run to run with connection set-up and scheduling noise. Bounded like the
// point itself. Raises `reference` to the fastest stream.
absl::Status MeasureTcp(const TransportOptions& options, bool iperf3,
                        TransportPoint* p, double* reference) {
  const uint64_t moved = 2 * p->bytes * p->steps;
  const uint64_t tcp_bytes = std::max<uint64_t>(moved, uint64_t{1} << 30);
  const absl::Duration tcp_limit = options.duration + absl::Seconds(5);
  PS_ASSIGN_OR_RETURN(p->socket,
                      SocketStream(tcp_bytes, options.tcp_write_size, tcp_limit,
                                   options.tcp_buffer_bytes));
  *reference = std::max(*reference, p->socket.bytes_per_second());
  if (iperf3) {
    PS_ASSIGN_OR_RETURN(
        p->iperf3, Iperf3Stream(tcp_bytes, options.tcp_write_size, tcp_limit));
    *reference = std::max(*reference, p->iperf3.bytes_per_second());
  }
  if (p->socket.bytes_per_cpu_second() > 0) {
    p->cpu_ratio = p->bytes_per_cpu_second() / p->socket.bytes_per_cpu_second();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TransportReport> RunTransport(const BenchCluster& cluster,
                                             const TransportOptions& options) {
  if (options.clients < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("clients: must be >= 1, got ", options.clients));
  }
  TransportReport report;
  report.shards = static_cast<int>(cluster.addresses().size());
  report.in_process = cluster.in_process();
  const CpuMeter cpu(cluster);
  report.cpu_scope = cpu.scope();
  const bool iperf3 = options.use_iperf3 && Iperf3Available();
  for (ConsistencyMode mode : options.modes) {
    for (uint64_t size : options.sizes) {
      if (size < 4 || size % 4 != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sizes: ", size, " is not a positive multiple of 4 bytes"));
      }
      PS_ASSIGN_OR_RETURN(TransportPoint p,
                          MeasurePoint(cluster, options, mode, size, cpu));
      if (options.measure_tcp) {
        PS_RETURN_IF_ERROR(
            MeasureTcp(options, iperf3, &p, &report.reference_bytes_per_s));
      }
      report.points.push_back(p);
    }
  }
  if (report.reference_bytes_per_s > 0) {
    for (TransportPoint& p : report.points) {
      p.ratio = p.goodput / report.reference_bytes_per_s;
    }
  }
  return report;
}

std::string FormatTransport(const TransportReport& r) {
  std::string out = absl::StrFormat(
      "transport: %d shard(s) %s; goodput = bytes pushed + pulled per second; "
      "ratio = goodput / the fastest raw loopback TCP stream of the run "
      "(%.1f MB/s; socket stream%s after each point);\n"
      "cores = CPU-seconds per second of %s; cpu ratio = bytes per CPU-second "
      "/ the socket stream's;\n"
      "cpu s/GB = CPU-seconds per 1e9 bytes pushed + pulled; tcp s/GB = the "
      "socket stream's per 1e9 bytes received; vs tcp = cpu s/GB / tcp s/GB\n",
      r.shards, r.in_process ? "in-process" : "of a running cluster",
      r.reference_bytes_per_s / 1e6,
      !r.points.empty() && r.points[0].iperf3.bytes > 0 ? " and iperf3" : "",
      r.cpu_scope);
  out += absl::StrFormat(
      "%-4s %8s %7s %8s %11s %11s %11s %6s %10s %10s %6s %6s %9s %8s %8s "
      "%6s\n",
      "mode", "size", "clients", "steps", "goodput", "tcp", "iperf3", "ratio",
      "p50", "p99", "errors", "cores", "cpu ratio", "cpu s/GB", "tcp s/GB",
      "vs tcp");
  for (const TransportPoint& p : r.points) {
    out += absl::StrFormat(
        "%-4s %8s %7d %8d %6.1f MB/s %6.1f MB/s %6.1f MB/s %6.2f %7.0f us "
        "%7.0f us %6d %6.2f %9.2f %8.3f %8.3f %6.2f\n",
        ModeName(p.mode), Bytes(p.bytes), p.clients, p.steps, p.goodput / 1e6,
        p.socket.bytes_per_second() / 1e6, p.iperf3.bytes_per_second() / 1e6,
        p.ratio, p.p50_us, p.p99_us, p.errors,
        p.seconds > 0 ? p.cpu_seconds / p.seconds : 0, p.cpu_ratio,
        p.cpu_s_per_gb(), p.socket.cpu_s_per_gb(), p.cpu_vs_tcp());
    if (!p.first_error.empty())
      out += absl::StrCat("  first error: ", p.first_error, "\n");
  }
  return out;
}

std::string TransportJson(const TransportReport& r) {
  std::vector<std::string> points;
  for (const TransportPoint& p : r.points) {
    points.push_back(absl::StrFormat(
        "{\"mode\":\"%s\",\"bytes\":%d,\"clients\":%d,\"steps\":%d,\"errors\":%"
        "d,"
        "\"first_error\":%s,\"seconds\":%.6f,\"goodput_bytes_per_s\":%.1f,"
        "\"p50_us\":%.1f,\"p99_us\":%.1f,\"tcp_socket_bytes_per_s\":%.1f,"
        "\"tcp_iperf3_bytes_per_s\":%.1f,\"ratio\":%.4f,\"cpu_seconds\":%.3f,"
        "\"bytes_per_cpu_s\":%.1f,\"tcp_socket_bytes_per_cpu_s\":%.1f,\"cpu_"
        "ratio\":%.4f,\"cpu_s_per_gb\":%.4f,\"tcp_socket_cpu_s_per_gb\":%.4f,"
        "\"tcp_iperf3_cpu_s_per_gb\":%.4f,\"cpu_vs_tcp\":%.4f}",
        ModeName(p.mode), p.bytes, p.clients, p.steps, p.errors,
        JsonString(p.first_error), p.seconds, p.goodput, p.p50_us, p.p99_us,
        p.socket.bytes_per_second(), p.iperf3.bytes_per_second(), p.ratio,
        p.cpu_seconds, p.bytes_per_cpu_second(),
        p.socket.bytes_per_cpu_second(), p.cpu_ratio, p.cpu_s_per_gb(),
        p.socket.cpu_s_per_gb(), p.iperf3.cpu_s_per_gb(), p.cpu_vs_tcp()));
  }
  return absl::StrFormat(
      "{\"mode\":\"transport\",\"shards\":%d,\"in_process\":%s,\"cpu_scope\":%"
      "s,"
      "\"reference_bytes_per_s\":%.1f,\"points\":[%s]"
      "}",
      r.shards, r.in_process ? "true" : "false", JsonString(r.cpu_scope),
      r.reference_bytes_per_s, absl::StrJoin(points, ","));
}

}  // namespace bench
}  // namespace ps
