#include "tools/psbench_lib.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "server/optimizer.h"
#include "tools/psbench_util.h"

namespace ps {
namespace bench {
namespace {

// Gradients and initial parameters: N(0, 0.01^2), like a trained model's.
constexpr float kGradStddev = 0.01f;

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

std::string Floats(uint64_t n) {
  if (n >= (1 << 20) && n % (1 << 20) == 0) return absl::StrCat(n >> 20, "M");
  return absl::StrCat(n);
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// What RunClients measured.
struct ClientRun {
  uint64_t steps = 0;  // measured steps, all clients
  uint64_t errors = 0;
  std::string first_error;
  double seconds = 0;  // measure start to the last measured step's end
  std::vector<double> latencies_us;
};

// Phases the driver thread of RunClients walks through; `on_measure` runs
// right after the measured phase starts and `on_measure_end` right before
// the clients are told to stop, with all of them still running (load: RSS
// at start and end, under the same traffic).
struct ClientPhases {
  absl::Duration warmup;   // traffic not measured, after the warm-up steps
  absl::Duration measure;  // traffic measured
  uint64_t max_steps = std::numeric_limits<uint64_t>::max();  // per client
};

// `clients` threads, each with its own PsClient (rank = index), run
// PushPull steps on the job of `assignment`: one warm-up step each, then
// `phases.warmup` of unmeasured traffic, then `phases.measure` measured.
// Stopping is step-consistent (no client starts a step that another will
// not start), so BSP clients never wait for a peer that left.
absl::StatusOr<ClientRun> RunClients(
    const BenchCluster& cluster, const Assignment& assignment, int clients,
    const PsClientOptions& client_options, const ClientPhases& phases,
    const std::function<void()>& on_measure,
    const std::function<void()>& on_measure_end) {
  uint64_t n = 0;
  for (const TensorSpec& t : assignment.spec().tensors()) {
    uint64_t k = 1;
    for (uint64_t d : t.shape()) k *= d;
    n += k;
  }
  std::vector<std::unique_ptr<PsClient>> ps_clients;
  for (int r = 0; r < clients; ++r) {
    Assignment a = assignment;
    a.set_rank(static_cast<uint32_t>(r));
    PS_ASSIGN_OR_RETURN(
        std::unique_ptr<PsClient> c,
        PsClient::Create(client_options, a, &cluster.security()));
    ps_clients.push_back(std::move(c));
  }

  absl::Mutex mu;
  uint64_t stop_step = std::numeric_limits<uint64_t>::max();  // guarded by mu
  uint64_t max_started = 0;                                   // guarded by mu
  bool stop_requested = false;                                // guarded by mu
  uint64_t errors = 0;                                        // guarded by mu
  std::string first_error;                                    // guarded by mu
  std::atomic<int64_t> measure_start_ns{std::numeric_limits<int64_t>::max()};
  absl::BlockingCounter warmed(clients);
  absl::Notification go;
  std::atomic<int> running{clients};
  absl::Notification all_exited;
  struct PerClient {
    uint64_t steps = 0;
    int64_t last_end_ns = 0;
    std::vector<double> latencies_us;
  };
  std::vector<PerClient> per(clients);

  auto fail = [&](const absl::Status& s) {
    absl::MutexLock l(&mu);
    if (errors++ == 0) first_error = s.ToString();
    stop_requested = true;
  };
  auto body = [&](int r) {
    PsClient& c = *ps_clients[r];
    std::vector<float> grad = NormalFloats(n, 1000 + r, kGradStddev);
    std::vector<float> params(n);
    absl::Status s = c.Pull(0, absl::MakeSpan(params));
    if (s.ok()) s = c.PushPull(0, grad, absl::MakeSpan(params));  // warm-up
    if (!s.ok()) fail(s);
    warmed.DecrementCount();
    go.WaitForNotification();
    for (uint64_t step = 1; s.ok(); ++step) {
      {
        absl::MutexLock l(&mu);
        if (step > phases.max_steps) stop_requested = true;
        if (stop_requested &&
            stop_step == std::numeric_limits<uint64_t>::max()) {
          stop_step = max_started + 1;
        }
        if (step >= stop_step) break;
        max_started = std::max(max_started, step);
      }
      const int64_t t0 = absl::GetCurrentTimeNanos();
      s = c.PushPull(step, grad, absl::MakeSpan(params));
      const int64_t t1 = absl::GetCurrentTimeNanos();
      if (!s.ok()) {
        fail(s);
        break;
      }
      if (t0 >= measure_start_ns.load(std::memory_order_acquire)) {
        per[r].steps++;
        per[r].last_end_ns = t1;
        per[r].latencies_us.push_back((t1 - t0) / 1e3);
      }
    }
    if (running.fetch_sub(1) == 1) all_exited.Notify();
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < clients; ++r) threads.emplace_back(body, r);
  warmed.Wait();
  go.Notify();
  if (phases.warmup > absl::ZeroDuration()) {
    all_exited.WaitForNotificationWithTimeout(phases.warmup);
  }
  const int64_t start_ns = absl::GetCurrentTimeNanos();
  measure_start_ns.store(start_ns, std::memory_order_release);
  if (on_measure) on_measure();
  all_exited.WaitForNotificationWithTimeout(phases.measure);
  if (on_measure_end) on_measure_end();
  {
    absl::MutexLock l(&mu);
    stop_requested = true;
  }
  for (std::thread& t : threads) t.join();

  ClientRun run;
  int64_t last_end = start_ns;
  for (PerClient& p : per) {
    run.steps += p.steps;
    last_end = std::max(last_end, p.last_end_ns);
    run.latencies_us.insert(run.latencies_us.end(), p.latencies_us.begin(),
                            p.latencies_us.end());
  }
  run.seconds = (last_end - start_ns) / 1e9;
  absl::MutexLock l(&mu);
  run.errors = errors;
  run.first_error = first_error;
  return run;
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
  // CPU of the clients (this process) and of the shards.
  std::vector<pid_t> servers;
  if (cluster.in_process()) {
    report.cpu_scope = "this process (clients and shards)";
  } else if (absl::StatusOr<std::vector<pid_t>> pids = cluster.ServerPids();
             pids.ok()) {
    servers = *pids;
    report.cpu_scope =
        absl::StrCat("this process and psd pids ", absl::StrJoin(servers, ","));
  } else {
    report.cpu_scope =
        absl::StrCat("this process only (", pids.status().message(), ")");
  }
  auto cpu_now = [&servers] {
    double total = CpuSeconds();
    for (pid_t pid : servers) {
      absl::StatusOr<double> s = ProcessCpuSeconds(pid);
      if (s.ok()) total += *s;
    }
    return total;
  };
  const bool iperf3 = options.use_iperf3 && Iperf3Available();
  for (ConsistencyMode mode : options.modes) {
    for (uint64_t size : options.sizes) {
      if (size < 4 || size % 4 != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sizes: ", size, " is not a positive multiple of 4 bytes"));
      }
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
          [&] { cpu0 = cpu_now(); }, nullptr);
      const double cpu_seconds = cpu_now() - cpu0;
      absl::Status dropped = cluster.DropJob(job.job_id);
      if (!run.ok()) return run.status();
      if (!dropped.ok()) return dropped;

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
      if (options.measure_tcp) {
        // The same bytes over raw TCP, at least 1 GiB: a shorter stream is
        // over in tens of ms, and its rate varied 1.2-3.7 GB/s run to run
        // with connection set-up and scheduling noise. Bounded like the
        // point itself.
        const uint64_t tcp_bytes = std::max<uint64_t>(moved, uint64_t{1} << 30);
        const absl::Duration tcp_limit = options.duration + absl::Seconds(5);
        PS_ASSIGN_OR_RETURN(
            p.socket, SocketStream(tcp_bytes, options.tcp_write_size, tcp_limit,
                                   options.tcp_buffer_bytes));
        report.reference_bytes_per_s =
            std::max(report.reference_bytes_per_s, p.socket.bytes_per_second());
        if (iperf3) {
          PS_ASSIGN_OR_RETURN(
              p.iperf3,
              Iperf3Stream(tcp_bytes, options.tcp_write_size, tcp_limit));
          report.reference_bytes_per_s = std::max(report.reference_bytes_per_s,
                                                  p.iperf3.bytes_per_second());
        }
        if (p.socket.bytes_per_cpu_second() > 0) {
          p.cpu_ratio =
              p.bytes_per_cpu_second() / p.socket.bytes_per_cpu_second();
        }
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

absl::StatusOr<ApplyReport> RunApply(const ApplyOptions& options) {
  struct Kind {
    const char* name;
    OptimizerKind kind;
    float momentum;
    bool nesterov;
    int touched;  // bytes per float read + written
  };
  // "sum" is the BSP aggregation (AddInto), not an optimizer.
  const Kind kinds[] = {
      {"sgd", SGD, 0.0f, false, 12},
      {"momentum", SGD, 0.9f, false, 20},
      {"nesterov", SGD, 0.9f, true, 20},
      {"adagrad", ADAGRAD, 0.0f, false, 20},
      {"adam", ADAM, 0.0f, false, 28},
      {"adamw", ADAMW, 0.0f, false, 28},
      {"sum", OPTIMIZER_UNSPECIFIED, 0.0f, false, 12},
  };
  // Repeats `fn` for min_time and min_iterations; seconds per call.
  auto time_it = [&](const std::function<void()>& fn) {
    int iterations = 0;
    const absl::Time start = absl::Now();
    absl::Duration elapsed;
    do {
      fn();
      ++iterations;
      elapsed = absl::Now() - start;
    } while (iterations < options.min_iterations || elapsed < options.min_time);
    return absl::ToDoubleSeconds(elapsed) / iterations;
  };
  ApplyReport report;
  for (uint64_t n : options.floats) {
    if (n == 0) return absl::InvalidArgumentError("floats: must be > 0");
    std::vector<float> params = NormalFloats(n, 1, kGradStddev);
    const std::vector<float> grad = NormalFloats(n, 2, kGradStddev);
    std::vector<float> dst(n, 0.0f);
    for (const Kind& k : kinds) {
      std::function<void()> apply;
      std::unique_ptr<Optimizer> opt;
      OptimizerState state;
      if (k.kind == OPTIMIZER_UNSPECIFIED) {
        apply = [&] { AddInto(absl::MakeSpan(params), grad.data()); };
      } else {
        OptimizerSpec spec;
        spec.set_kind(k.kind);
        spec.set_learning_rate(0.01f);
        spec.set_momentum(k.momentum);
        spec.set_nesterov(k.nesterov);
        if (k.kind == ADAMW) spec.set_weight_decay(0.01f);
        PS_ASSIGN_OR_RETURN(opt, Optimizer::Create(spec));
        state = opt->NewState(n);
        apply = [&] {
          opt->Apply(absl::MakeSpan(params), grad.data(), 1.0f, &state);
        };
      }
      // memcpy of the same bytes, measured next to each optimizer so both
      // see the same machine load.
      const double copy_s = time_it([&] {
        std::memcpy(dst.data(), grad.data(), n * sizeof(float));
        asm volatile("" : : "r"(dst.data()) : "memory");
      });
      const double apply_s = time_it([&] {
        apply();
        asm volatile("" : : "r"(params.data()) : "memory");
      });
      ApplyPoint p;
      p.optimizer = k.name;
      p.floats = n;
      p.seconds_per_apply = apply_s;
      p.floats_per_second = n / apply_s;
      p.touched_bytes_per_second = static_cast<double>(n) * k.touched / apply_s;
      p.memcpy_seconds = copy_s;
      p.memcpy_bytes_per_second = n * 8.0 / copy_s;
      p.ratio_to_memcpy = copy_s / apply_s;
      report.points.push_back(p);
    }
  }
  return report;
}

absl::StatusOr<LoadReport> RunLoad(const BenchCluster& cluster,
                                   const LoadOptions& options) {
  if (options.clients < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("clients: must be >= 1, got ", options.clients));
  }
  if (options.bytes < 4 || options.bytes % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bytes: ", options.bytes, " is not a positive multiple of 4"));
  }
  LoadReport report;
  report.clients = options.clients;
  PS_ASSIGN_OR_RETURN(std::vector<pid_t> pids, cluster.ServerPids());
  report.rss_source = cluster.in_process()
                          ? "self"
                          : absl::StrCat("psd pids ", absl::StrJoin(pids, ","));
  BenchJob job;
  job.job_id = absl::StrCat("psbench-load-", getpid());
  job.floats = options.bytes / 4;
  job.mode = options.mode;
  job.workers = static_cast<uint32_t>(options.clients);
  job.partition_bytes = options.partition_bytes;
  PS_ASSIGN_OR_RETURN(Assignment a, cluster.RegisterJob(job));
  ClientPhases phases;
  phases.warmup = options.warmup;
  phases.measure = options.duration;
  absl::Status rss_status;
  auto rss = [&](uint64_t* out) {
    absl::StatusOr<uint64_t> r = cluster.ResidentBytes();
    if (r.ok()) {
      *out = *r;
    } else if (rss_status.ok()) {
      rss_status = r.status();
    }
  };
  absl::StatusOr<ClientRun> run = RunClients(
      cluster, a, options.clients, options.client, phases,
      [&] { rss(&report.rss_start); }, [&] { rss(&report.rss_end); });
  absl::Status dropped = cluster.DropJob(job.job_id);
  if (!run.ok()) return run.status();
  if (!rss_status.ok()) return rss_status;
  if (!dropped.ok()) return dropped;
  report.steps = run->steps;
  report.errors = run->errors;
  report.first_error = run->first_error;
  report.seconds = run->seconds;
  report.steps_per_second = run->seconds > 0 ? run->steps / run->seconds : 0;
  report.p50_us = Percentile(run->latencies_us, 0.50);
  report.p99_us = Percentile(run->latencies_us, 0.99);
  report.max_us = Percentile(run->latencies_us, 1.0);
  report.rss_growth =
      report.rss_start > 0
          ? static_cast<double>(report.rss_end) / report.rss_start - 1.0
          : 0;
  report.pass =
      report.errors == 0 && report.rss_growth < options.max_rss_growth;
  return report;
}

std::string FormatTransport(const TransportReport& r) {
  std::string out = absl::StrFormat(
      "transport: %d shard(s) %s; goodput = bytes pushed + pulled per second; "
      "ratio = goodput / the fastest raw loopback TCP stream of the run "
      "(%.1f MB/s; socket stream%s after each point);\n"
      "cores = CPU-seconds per second of %s; cpu ratio = bytes per CPU-second "
      "/ "
      "the socket stream's\n",
      r.shards, r.in_process ? "in-process" : "of a running cluster",
      r.reference_bytes_per_s / 1e6,
      !r.points.empty() && r.points[0].iperf3.bytes > 0 ? " and iperf3" : "",
      r.cpu_scope);
  out += absl::StrFormat(
      "%-4s %8s %7s %8s %11s %11s %11s %6s %10s %10s %6s %6s %9s\n", "mode",
      "size", "clients", "steps", "goodput", "tcp", "iperf3", "ratio", "p50",
      "p99", "errors", "cores", "cpu ratio");
  for (const TransportPoint& p : r.points) {
    out += absl::StrFormat(
        "%-4s %8s %7d %8d %6.1f MB/s %6.1f MB/s %6.1f MB/s %6.2f %7.0f us "
        "%7.0f us %6d %6.2f "
        "%9.2f\n",
        ModeName(p.mode), Bytes(p.bytes), p.clients, p.steps, p.goodput / 1e6,
        p.socket.bytes_per_second() / 1e6, p.iperf3.bytes_per_second() / 1e6,
        p.ratio, p.p50_us, p.p99_us, p.errors,
        p.seconds > 0 ? p.cpu_seconds / p.seconds : 0, p.cpu_ratio);
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
        "ratio\":%.4f}",
        ModeName(p.mode), p.bytes, p.clients, p.steps, p.errors,
        JsonString(p.first_error), p.seconds, p.goodput, p.p50_us, p.p99_us,
        p.socket.bytes_per_second(), p.iperf3.bytes_per_second(), p.ratio,
        p.cpu_seconds, p.bytes_per_cpu_second(),
        p.socket.bytes_per_cpu_second(), p.cpu_ratio));
  }
  return absl::StrFormat(
      "{\"mode\":\"transport\",\"shards\":%d,\"in_process\":%s,\"cpu_scope\":%"
      "s,"
      "\"reference_bytes_per_s\":%.1f,\"points\":[%s]"
      "}",
      r.shards, r.in_process ? "true" : "false", JsonString(r.cpu_scope),
      r.reference_bytes_per_s, absl::StrJoin(points, ","));
}

std::string FormatApply(const ApplyReport& r) {
  std::string out =
      "apply: Optimizer::Apply on one chunk (sum = BSP gradient sum), next to "
      "memcpy of the "
      "same floats; touched = bytes the update reads + writes\n";
  out += absl::StrFormat("%-9s %7s %11s %12s %13s %11s %13s %8s\n", "optimizer",
                         "floats", "apply ms", "Gfloat/s", "touched GB/s",
                         "memcpy ms", "memcpy GB/s", "vs copy");
  for (const ApplyPoint& p : r.points) {
    out += absl::StrFormat(
        "%-9s %7s %11.3f %12.3f %13.2f %11.3f %13.2f %8.2f\n", p.optimizer,
        Floats(p.floats), p.seconds_per_apply * 1e3, p.floats_per_second / 1e9,
        p.touched_bytes_per_second / 1e9, p.memcpy_seconds * 1e3,
        p.memcpy_bytes_per_second / 1e9, p.ratio_to_memcpy);
  }
  return out;
}

std::string ApplyJson(const ApplyReport& r) {
  std::vector<std::string> points;
  for (const ApplyPoint& p : r.points) {
    points.push_back(absl::StrFormat(
        "{\"optimizer\":\"%s\",\"floats\":%d,\"seconds_per_apply\":%.9f,"
        "\"floats_per_s\":%.1f,\"touched_bytes_per_s\":%.1f,\"memcpy_seconds\":"
        "%.9f,"
        "\"memcpy_bytes_per_s\":%.1f,\"ratio_to_memcpy\":%.4f}",
        p.optimizer, p.floats, p.seconds_per_apply, p.floats_per_second,
        p.touched_bytes_per_second, p.memcpy_seconds, p.memcpy_bytes_per_second,
        p.ratio_to_memcpy));
  }
  return absl::StrFormat("{\"mode\":\"apply\",\"points\":[%s]}",
                         absl::StrJoin(points, ","));
}

std::string FormatLoad(const LoadReport& r) {
  return absl::StrFormat(
      "load: %d clients, %.1f s measured: %d steps (%.0f/s), errors %d, "
      "latency p50 %.0f us "
      "p99 %.0f us max %.0f us\n"
      "resident memory (%s): %.1f MiB after warm-up, %.1f MiB at end, growth "
      "%+.2f%%\n"
      "%s%s\n",
      r.clients, r.seconds, r.steps, r.steps_per_second, r.errors, r.p50_us,
      r.p99_us, r.max_us, r.rss_source, r.rss_start / 1048576.0,
      r.rss_end / 1048576.0, 100 * r.rss_growth,
      r.first_error.empty()
          ? ""
          : absl::StrCat("first error: ", r.first_error, "\n"),
      r.pass ? "PASS" : "FAIL");
}

std::string LoadJson(const LoadReport& r) {
  return absl::StrFormat(
      "{\"mode\":\"load\",\"clients\":%d,\"seconds\":%.3f,\"steps\":%d,"
      "\"steps_per_s\":%.1f,\"errors\":%d,\"first_error\":%s,\"p50_us\":%.1f,"
      "\"p99_us\":%.1f,\"max_us\":%.1f,\"rss_source\":%s,\"rss_start_bytes\":%"
      "d,"
      "\"rss_end_bytes\":%d,\"rss_growth\":%.5f,\"pass\":%s}",
      r.clients, r.seconds, r.steps, r.steps_per_second, r.errors,
      JsonString(r.first_error), r.p50_us, r.p99_us, r.max_us,
      JsonString(r.rss_source), r.rss_start, r.rss_end, r.rss_growth,
      r.pass ? "true" : "false");
}

}  // namespace bench
}  // namespace ps
