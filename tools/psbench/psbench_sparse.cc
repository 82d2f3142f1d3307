#include "tools/psbench/psbench_sparse.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/json_string.h"
#include "common/status_macros.h"
#include "tools/psbench/psbench_clients.h"
#include "tools/psbench/psbench_sparse_client.h"
#include "tools/psbench/psbench_util.h"

namespace ps {
namespace bench {
namespace {

constexpr char kTable[] = "emb";
// The largest populate batch: one step of the populating rank.
constexpr uint64_t kPopulateRows = 1 << 16;

// One client thread of the sparse run: its connections, batches, gradient
// and pulled rows. Kept across the repetitions of a point (the client's
// steps continue).
struct SparseWorker {
  std::unique_ptr<SparseClient> client;
  std::vector<SparseBatch> batches;
  size_t next = 0;
  std::vector<float> grads, rows;

  absl::Status Step() {
    const SparseBatch& b = batches[next];
    next = (next + 1) % batches.size();
    return client->Exchange(b, grads, absl::MakeSpan(rows));
  }
};

// What one timed run (either path) measured.
struct Run {
  uint64_t steps = 0;
  uint64_t errors = 0;
  std::string first_error;
  double seconds = 0;
  double cpu_seconds = 0;
  std::vector<double> latencies_us;
};

Spread SpreadOf(std::vector<double> v) {
  Spread s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  const size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  return s;
}

absl::Status Validate(const SparseBenchOptions& o) {
  if (o.rows.empty()) return absl::InvalidArgumentError("rows: empty");
  for (uint64_t r : o.rows) {
    if (r == 0 || r > o.universe) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rows: ", r, " must be in [1, universe = ", o.universe, "]"));
    }
  }
  if (o.universe > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError("universe: at most 2^32 - 1 ids");
  }
  if (o.dim == 0 || o.dim > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("dim: must be in [1, 4096], got ", o.dim));
  }
  if (o.optimizer != SGD && o.optimizer != ADAGRAD) {
    return absl::InvalidArgumentError("optimizer: SGD or ADAGRAD");
  }
  if (o.clients < 1 || o.repetitions < 1 || o.batches_per_client < 1 ||
      o.client.max_inflight_per_shard < 1) {
    return absl::InvalidArgumentError(
        "clients, repetitions, batches_per_client and "
        "client.max_inflight_per_shard: must be >= 1");
  }
  return absl::OkStatus();
}

// Calls in flight per shard per client: each its own worker rank.
uint32_t Slots(const SparseBenchOptions& o) {
  return static_cast<uint32_t>(o.client.max_inflight_per_shard);
}

BenchJob SparseJob(const SparseBenchOptions& o, uint64_t rows) {
  BenchJob job;
  job.job_id = absl::StrCat("psbench-", getpid(), "-sparse-", rows);
  job.floats = o.dim;  // a job needs a dense tensor; this one is idle
  job.mode = ASP;
  // Every client's slots, and the populating rank.
  job.workers = static_cast<uint32_t>(o.clients) * Slots(o) + 1;
  job.optimizer = o.optimizer;
  job.learning_rate = o.learning_rate;
  job.seed = o.seed;
  TableSpec t;
  t.set_name(kTable);
  t.set_dim(o.dim);
  t.mutable_optimizer()->set_kind(o.optimizer);
  t.mutable_optimizer()->set_learning_rate(o.learning_rate);
  t.set_num_ids(o.universe);
  t.set_admit_after(1);
  job.tables.push_back(t);
  return job;
}

BenchJob DenseJob(const SparseBenchOptions& o, uint64_t rows) {
  BenchJob job;
  job.job_id = absl::StrCat("psbench-", getpid(), "-dense-", rows);
  job.floats = rows * o.dim;
  job.mode = ASP;
  job.workers = static_cast<uint32_t>(o.clients);
  job.partition_bytes = o.partition_bytes;
  job.optimizer = o.optimizer;
  job.learning_rate = o.learning_rate;
  job.seed = o.seed;
  return job;
}

absl::StatusOr<std::unique_ptr<SparseClient>> NewClient(
    const BenchCluster& cluster, const SparseBenchOptions& o,
    const std::string& job_id, std::vector<uint32_t> ranks) {
  SparseClientOptions c;
  c.job_id = job_id;
  c.table = kTable;
  c.dim = o.dim;
  c.ranks = std::move(ranks);
  c.request_bytes = o.client.max_request_bytes;
  c.channels_per_shard = o.client.channels_per_shard;
  c.rpc_deadline = o.client.rpc_deadline;
  return SparseClient::Create(c, cluster.addresses(), &cluster.security());
}

// Client `c`'s batches: consecutive windows of a seeded permutation of the
// universe, so each batch holds `rows` distinct ids.
std::vector<SparseBatch> Batches(const SparseBenchOptions& o, uint64_t rows,
                                 int c, uint32_t num_shards) {
  std::vector<uint32_t> perm(o.universe);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(o.seed * 7919 + static_cast<uint64_t>(c));
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<SparseBatch> out;
  std::vector<uint64_t> ids(rows);
  for (int b = 0; b < o.batches_per_client; ++b) {
    for (uint64_t i = 0; i < rows; ++i) {
      ids[i] = perm[(b * rows + i) % o.universe];
    }
    out.push_back(RouteBatch(ids, num_shards));
  }
  return out;
}

// Pushes (and pulls) every id of the universe once, as the last rank.
absl::Status Populate(const BenchCluster& cluster, const SparseBenchOptions& o,
                      const std::string& job_id) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<SparseClient> client,
                      NewClient(cluster, o, job_id,
                                {static_cast<uint32_t>(o.clients) * Slots(o)}));
  const uint32_t shards = static_cast<uint32_t>(cluster.addresses().size());
  for (uint64_t begin = 0; begin < o.universe; begin += kPopulateRows) {
    const uint64_t n = std::min(kPopulateRows, o.universe - begin);
    std::vector<uint64_t> ids(n);
    std::iota(ids.begin(), ids.end(), begin);
    const std::vector<float> grads =
        NormalFloats(n * o.dim, begin, kGradStddev);
    std::vector<float> rows(n * o.dim);
    PS_RETURN_IF_ERROR(
        client->Exchange(RouteBatch(ids, shards), grads, absl::MakeSpan(rows)));
  }
  return absl::OkStatus();
}

// The sparse path's W threads: one warm-up step each, then steps for
// `duration`; steps that start after the measurement began are counted.
Run RunSparse(std::vector<SparseWorker>& workers, absl::Duration duration,
              const CpuMeter& cpu) {
  const int n = static_cast<int>(workers.size());
  absl::BlockingCounter warmed(n);
  absl::Notification go, all_exited;
  std::atomic<bool> stop{false};
  std::atomic<int> running{n};
  std::atomic<int64_t> start_ns{std::numeric_limits<int64_t>::max()};
  absl::Mutex mu;
  Run run;
  int64_t last_end_ns = 0;  // guarded by mu, as are run's fields
  std::vector<std::thread> threads;
  for (int w = 0; w < n; ++w) {
    threads.emplace_back([&, w] {
      std::vector<double> lat;
      int64_t last = 0;
      absl::Status s = workers[w].Step();
      warmed.DecrementCount();
      go.WaitForNotification();
      while (s.ok() && !stop.load(std::memory_order_acquire)) {
        const int64_t t0 = absl::GetCurrentTimeNanos();
        s = workers[w].Step();
        const int64_t t1 = absl::GetCurrentTimeNanos();
        if (s.ok() && t0 >= start_ns.load(std::memory_order_acquire)) {
          lat.push_back((t1 - t0) / 1e3);
          last = t1;
        }
      }
      {
        absl::MutexLock l(&mu);
        if (!s.ok() && run.errors++ == 0) run.first_error = s.ToString();
        run.steps += lat.size();
        run.latencies_us.insert(run.latencies_us.end(), lat.begin(), lat.end());
        last_end_ns = std::max(last_end_ns, last);
      }
      if (!s.ok()) stop.store(true, std::memory_order_release);
      if (running.fetch_sub(1) == 1) all_exited.Notify();
    });
  }
  warmed.Wait();
  const int64_t start = absl::GetCurrentTimeNanos();
  start_ns.store(start, std::memory_order_release);
  const double cpu0 = cpu.Now();
  go.Notify();
  all_exited.WaitForNotificationWithTimeout(duration);
  stop.store(true, std::memory_order_release);
  for (std::thread& t : threads) t.join();
  run.cpu_seconds = cpu.Now() - cpu0;
  run.seconds = std::max<int64_t>(0, last_end_ns - start) / 1e9;
  return run;
}

// The dense path: the transport mode's client fleet on the dense job.
absl::StatusOr<Run> RunDense(const BenchCluster& cluster,
                             const Assignment& dense,
                             const SparseBenchOptions& o, const CpuMeter& cpu) {
  ClientPhases phases;
  phases.warmup = absl::ZeroDuration();
  phases.measure = o.duration;
  double cpu0 = 0;
  PS_ASSIGN_OR_RETURN(ClientRun c,
                      RunClients(
                          cluster, dense, o.clients, o.client, phases,
                          [&] { cpu0 = cpu.Now(); }, nullptr));
  Run run;
  run.cpu_seconds = cpu.Now() - cpu0;
  run.steps = c.steps;
  run.errors = c.errors;
  run.first_error = c.first_error;
  run.seconds = c.seconds;
  run.latencies_us = std::move(c.latencies_us);
  return run;
}

// Adds one repetition's run to `path`; returns its goodput.
double Record(const Run& run, uint64_t bytes, PathResult* path,
              std::vector<double>* latencies, std::vector<double>* cores) {
  const double goodput =
      run.seconds > 0 ? 2.0 * bytes * run.steps / run.seconds : 0;
  path->goodput.push_back(goodput);
  path->steps += run.steps;
  if (run.errors > 0 && path->errors == 0) path->first_error = run.first_error;
  path->errors += run.errors;
  latencies->insert(latencies->end(), run.latencies_us.begin(),
                    run.latencies_us.end());
  cores->push_back(run.seconds > 0 ? run.cpu_seconds / run.seconds : 0);
  return goodput;
}

void Summarize(const std::vector<double>& latencies,
               const std::vector<double>& cores, PathResult* path) {
  path->goodput_spread = SpreadOf(path->goodput);
  path->p50_us = Percentile(latencies, 0.50);
  path->p99_us = Percentile(latencies, 0.99);
  path->cores = SpreadOf(cores).median;
}

// The table's rows and bytes over every shard.
absl::Status ReadTable(const BenchCluster& cluster, const std::string& job_id,
                       SparseBenchPoint* p) {
  PS_ASSIGN_OR_RETURN(std::vector<ShardStats> stats, cluster.Stats(job_id));
  for (const ShardStats& s : stats) {
    for (const JobStats& j : s.job_stats()) {
      for (const TableStats& t : j.tables()) {
        p->table_rows += t.rows();
        p->table_bytes += t.bytes_used();
      }
    }
  }
  return absl::OkStatus();
}

// Measures one point with both jobs registered (MeasurePoint drops them).
absl::Status MeasureRegistered(const BenchCluster& cluster,
                               const SparseBenchOptions& o,
                               const Assignment& dense,
                               const std::string& sparse_job,
                               const CpuMeter& cpu, SparseBenchPoint* p) {
  if (o.populate) PS_RETURN_IF_ERROR(Populate(cluster, o, sparse_job));
  const uint32_t shards = static_cast<uint32_t>(cluster.addresses().size());
  std::vector<SparseWorker> workers(o.clients);
  for (int c = 0; c < o.clients; ++c) {
    std::vector<uint32_t> ranks;
    for (uint32_t k = 0; k < Slots(o); ++k) ranks.push_back(c * Slots(o) + k);
    PS_ASSIGN_OR_RETURN(workers[c].client,
                        NewClient(cluster, o, sparse_job, std::move(ranks)));
    workers[c].batches = Batches(o, p->rows, c, shards);
    workers[c].grads = NormalFloats(p->rows * o.dim, 1000 + c, kGradStddev);
    workers[c].rows.resize(p->rows * o.dim);
  }
  std::vector<double> sparse_lat, dense_lat, sparse_cores, dense_cores;
  for (int rep = 0; rep < o.repetitions; ++rep) {
    double sparse = 0, dense_goodput = 0;
    // Alternate which path goes first, so drift over time favours neither.
    for (int half = 0; half < 2; ++half) {
      if ((half == 0) == (rep % 2 == 0)) {
        if (!o.dense) continue;
        PS_ASSIGN_OR_RETURN(Run d, RunDense(cluster, dense, o, cpu));
        dense_goodput =
            Record(d, p->bytes, &p->dense, &dense_lat, &dense_cores);
      } else {
        sparse = Record(RunSparse(workers, o.duration, cpu), p->bytes,
                        &p->sparse, &sparse_lat, &sparse_cores);
      }
    }
    if (o.dense) {
      p->ratio.push_back(dense_goodput > 0 ? sparse / dense_goodput : 0);
    }
    if (p->sparse.errors > 0 || p->dense.errors > 0) break;
  }
  for (const SparseWorker& w : workers) p->sparse_calls += w.client->calls();
  Summarize(sparse_lat, sparse_cores, &p->sparse);
  Summarize(dense_lat, dense_cores, &p->dense);
  p->ratio_spread = SpreadOf(p->ratio);
  return ReadTable(cluster, sparse_job, p);
}

absl::StatusOr<SparseBenchPoint> MeasurePoint(const BenchCluster& cluster,
                                              const SparseBenchOptions& o,
                                              uint64_t rows,
                                              const CpuMeter& cpu) {
  SparseBenchPoint p;
  p.rows = rows;
  p.bytes = rows * o.dim * sizeof(float);
  const BenchJob sparse = SparseJob(o, rows);
  const BenchJob dense = DenseJob(o, rows);
  PS_RETURN_IF_ERROR(cluster.RegisterJob(sparse).status());
  absl::StatusOr<Assignment> a = cluster.RegisterJob(dense);
  absl::Status measured =
      a.ok() ? MeasureRegistered(cluster, o, *a, sparse.job_id, cpu, &p)
             : a.status();
  absl::Status dropped = cluster.DropJob(sparse.job_id);
  if (a.ok()) dropped.Update(cluster.DropJob(dense.job_id));
  PS_RETURN_IF_ERROR(measured);
  PS_RETURN_IF_ERROR(dropped);
  return p;
}

std::string SpreadText(const Spread& s, double unit, const char* fmt) {
  return absl::StrCat(absl::StrFormat(fmt, s.median / unit), " [",
                      absl::StrFormat(fmt, s.min / unit), "-",
                      absl::StrFormat(fmt, s.max / unit), "]");
}

std::string PathJson(const PathResult& r) {
  std::vector<std::string> g;
  for (double v : r.goodput) g.push_back(absl::StrFormat("%.1f", v));
  return absl::StrFormat(
      "{\"goodput_bytes_per_s\":[%s],\"median\":%.1f,\"min\":%.1f,\"max\":%."
      "1f,\"steps\":%d,\"errors\":%d,\"first_error\":%s,\"p50_us\":%.1f,"
      "\"p99_us\":%.1f,\"cores\":%.3f}",
      absl::StrJoin(g, ","), r.goodput_spread.median, r.goodput_spread.min,
      r.goodput_spread.max, r.steps, r.errors, JsonString(r.first_error),
      r.p50_us, r.p99_us, r.cores);
}

}  // namespace

absl::StatusOr<SparseBenchReport> RunSparseBench(
    const BenchCluster& cluster, const SparseBenchOptions& options) {
  PS_RETURN_IF_ERROR(Validate(options));
  SparseBenchReport report;
  report.shards = static_cast<int>(cluster.addresses().size());
  report.in_process = cluster.in_process();
  report.options = options;
  const CpuMeter cpu(cluster);
  report.cpu_scope = cpu.scope();
  for (uint64_t rows : options.rows) {
    PS_ASSIGN_OR_RETURN(SparseBenchPoint p,
                        MeasurePoint(cluster, options, rows, cpu));
    report.points.push_back(std::move(p));
  }
  return report;
}

std::string FormatSparseBench(const SparseBenchReport& r) {
  const SparseBenchOptions& o = r.options;
  std::string out = absl::StrFormat(
      "sparse: %d shard(s) %s, %d client(s), ASP; table dim %d, %s, ids from "
      "[0, %d), %s;\n"
      "calls of <= %d bytes (ids + values), %d in flight per shard per "
      "client, %d connection(s) per shard (the dense client's settings);\n"
      "goodput = rows x dim x 4 bytes pushed + pulled per second, dense = "
      "PushPull of a rows x dim float tensor; %d repetition(s) of %.1f s, "
      "dense and sparse alternating: median [min-max];\n"
      "cores = CPU-seconds per second of %s%s\n",
      r.shards, r.in_process ? "in-process" : "of a running cluster", o.clients,
      o.dim, OptimizerKind_Name(o.optimizer), o.universe,
      o.populate ? "every row created before measuring (each id pushed once)"
                 : "rows created by the measured pushes (admit_after 1)",
      o.client.max_request_bytes, o.client.max_inflight_per_shard,
      o.client.channels_per_shard, o.repetitions, Seconds(o.duration),
      r.cpu_scope, o.dense ? "" : " (no dense runs: --dense=false)");
  out += absl::StrFormat(
      "%7s %8s %-26s %-26s %-18s %-17s %-17s %-11s %9s %7s %6s\n", "rows",
      "bytes", "sparse MB/s", "dense MB/s", "ratio", "sparse p50/p99 ms",
      "dense p50/p99 ms", "cores s/d", "rows held", "B/row", "errors");
  for (const SparseBenchPoint& p : r.points) {
    out += absl::StrFormat(
        "%7d %8s %-26s %-26s %-18s %-17s %-17s %-11s %9d %7.1f %6d\n", p.rows,
        absl::StrCat(p.bytes >> 10, " KiB"),
        SpreadText(p.sparse.goodput_spread, 1e6, "%.1f"),
        SpreadText(p.dense.goodput_spread, 1e6, "%.1f"),
        SpreadText(p.ratio_spread, 1, "%.2f"),
        absl::StrFormat("%.2f / %.2f", p.sparse.p50_us / 1e3,
                        p.sparse.p99_us / 1e3),
        absl::StrFormat("%.2f / %.2f", p.dense.p50_us / 1e3,
                        p.dense.p99_us / 1e3),
        absl::StrFormat("%.2f/%.2f", p.sparse.cores, p.dense.cores),
        p.table_rows,
        p.table_rows ? static_cast<double>(p.table_bytes) / p.table_rows : 0.0,
        p.sparse.errors + p.dense.errors);
    for (const std::string& e : {p.sparse.first_error, p.dense.first_error}) {
      if (!e.empty()) out += absl::StrCat("  first error: ", e, "\n");
    }
  }
  return out;
}

std::string SparseBenchJson(const SparseBenchReport& r) {
  const SparseBenchOptions& o = r.options;
  std::vector<std::string> points;
  for (const SparseBenchPoint& p : r.points) {
    std::vector<std::string> ratios;
    for (double v : p.ratio) ratios.push_back(absl::StrFormat("%.4f", v));
    points.push_back(absl::StrFormat(
        "{\"rows\":%d,\"bytes\":%d,\"sparse\":%s,\"dense\":%s,\"ratio\":[%s],"
        "\"ratio_median\":%.4f,\"ratio_min\":%.4f,\"ratio_max\":%.4f,"
        "\"table_rows\":%d,\"table_bytes\":%d,\"sparse_calls\":%d}",
        p.rows, p.bytes, PathJson(p.sparse), PathJson(p.dense),
        absl::StrJoin(ratios, ","), p.ratio_spread.median, p.ratio_spread.min,
        p.ratio_spread.max, p.table_rows, p.table_bytes, p.sparse_calls));
  }
  return absl::StrFormat(
      "{\"mode\":\"sparse\",\"shards\":%d,\"in_process\":%s,\"cpu_scope\":%s,"
      "\"clients\":%d,\"dim\":%d,\"optimizer\":%s,\"universe\":%d,"
      "\"populate\":%s,\"repetitions\":%d,\"seconds\":%.3f,"
      "\"request_bytes\":%d,\"inflight_per_shard\":%d,"
      "\"channels_per_shard\":%d,\"points\":[%s]}",
      r.shards, r.in_process ? "true" : "false", JsonString(r.cpu_scope),
      o.clients, o.dim, JsonString(OptimizerKind_Name(o.optimizer)), o.universe,
      o.populate ? "true" : "false", o.repetitions, Seconds(o.duration),
      o.client.max_request_bytes, o.client.max_inflight_per_shard,
      o.client.channels_per_shard, absl::StrJoin(points, ","));
}

}  // namespace bench
}  // namespace ps
