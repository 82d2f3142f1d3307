// psbench: transport, optimizer-apply, load and sparse-table benchmarks of
// the parameter server (see tools/psbench/psbench_transport.h, psbench_apply.h,
// psbench_load.h and psbench_sparse.h for what each mode measures).
//
//   psbench --mode=transport [--sizes=4K,64K,1M,4M,16M,64M] [--modes=asp,bsp]
//           [--clients=2] [--shards=2 | --cluster=FILE] [--seconds=3]
//   psbench --mode=apply [--floats=1M,4M,16M,64M]
//   psbench --mode=load [--clients=64] [--seconds=60] [--warmup_seconds=5]
//   psbench --mode=sparse [--rows=4K,16K,64K] [--dim=16] [--shards=2]
//           [--table_optimizer=adagrad] [--universe=1M] [--populate=true]
//           [--repetitions=5] [--clients=2] [--seconds=2] [--dense=true]
//   common: --json (one JSON object on stdout), --time_limit_seconds
//
// Exit codes: 0 done; 1 the run failed its bar (load: errors or resident
// memory growth >= 10%; transport, sparse: any step error); 2 bad flags;
// 3 setup
// failed (cannot start or reach the shards); 4 the time limit passed.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/process_tuning.h"
#include "common/status_macros.h"
#include "tools/psbench/psbench_apply.h"
#include "tools/psbench/psbench_cluster.h"
#include "tools/psbench/psbench_load.h"
#include "tools/psbench/psbench_sparse.h"
#include "tools/psbench/psbench_transport.h"

ABSL_FLAG(std::string, mode, "transport", "transport, apply, load or sparse");
ABSL_FLAG(std::string, cluster, "",
          "cluster file of a running cluster (default: start shards in this "
          "process)");
ABSL_FLAG(int, shards, 2, "in-process shards (transport, load, sparse)");
ABSL_FLAG(int, clients, 0,
          "client threads, each its own PsClient (default: transport 2, load "
          "64, sparse 2)");
ABSL_FLAG(std::string, sizes, "4K,64K,1M,4M,16M,64M",
          "transport: tensor sizes in bytes (K/M suffixes)");
ABSL_FLAG(std::string, modes, "asp,bsp",
          "transport: consistency modes, asp and/or bsp");
ABSL_FLAG(double, seconds, 0,
          "measured seconds per transport point (default 3), of the load run "
          "(default 60) or of each sparse and dense run (default 2)");
ABSL_FLAG(double, warmup_seconds, 5,
          "load: unmeasured traffic before the start RSS");
ABSL_FLAG(std::string, load_bytes, "256K", "load: tensor size in bytes");
ABSL_FLAG(double, max_rss_growth, 0.10,
          "load: fail when resident memory grows by this fraction or more");
ABSL_FLAG(std::string, floats, "1M,4M,16M,64M",
          "apply: chunk sizes in floats (K/M suffixes)");
ABSL_FLAG(std::string, partition_bytes, "1M",
          "transport: the job's partition_bytes (chunk size)");
ABSL_FLAG(std::string, max_request_bytes, "",
          "PsClientOptions.max_request_bytes (default: the client's)");
ABSL_FLAG(int, inflight_per_shard, 0,
          "PsClientOptions.max_inflight_per_shard (0: the client's default)");
ABSL_FLAG(int, channels_per_shard, 0,
          "PsClientOptions.channels_per_shard (0: the client's default)");
ABSL_FLAG(bool, tcp, true,
          "transport: measure raw loopback TCP next to every point");
ABSL_FLAG(std::string, tcp_buffer_bytes, "0",
          "transport: the socket stream cycles through buffers of this size "
          "(0: one 1 MiB write, cache-hot like iperf3)");
ABSL_FLAG(bool, iperf3, true,
          "transport: use iperf3 for the raw TCP reference when on PATH");
ABSL_FLAG(std::string, rows, "4K,16K,64K",
          "sparse: unique rows per client step (K/M suffixes)");
ABSL_FLAG(int, dim, 16, "sparse: floats per table row");
ABSL_FLAG(std::string, table_optimizer, "adagrad",
          "sparse: sgd or adagrad (the table's and the dense tensor's)");
ABSL_FLAG(std::string, universe, "1M",
          "sparse: ids are drawn from [0, universe)");
ABSL_FLAG(bool, populate, true,
          "sparse: push every id once before measuring (false: the measured "
          "pushes create the rows, admit_after 1)");
ABSL_FLAG(bool, dense, true,
          "sparse: measure the dense baseline too (false: the sparse path "
          "alone, e.g. to profile it; no ratio)");
ABSL_FLAG(int, repetitions, 5,
          "sparse: dense/sparse measurement rounds per point");
ABSL_FLAG(bool, json, false, "print one JSON object instead of tables");
ABSL_FLAG(double, time_limit_seconds, 0,
          "abort (exit 4) after this long (default: from the mode's options)");

namespace ps {
namespace bench {
namespace {

constexpr int kExitBar = 1;
constexpr int kExitUsage = 2;
constexpr int kExitSetup = 3;
constexpr int kExitTimeout = 4;

// "4K" -> 4096, "1M" -> 1048576, "123" -> 123.
bool ParseSize(absl::string_view s, uint64_t* out) {
  s = absl::StripAsciiWhitespace(s);
  uint64_t mult = 1;
  if (!s.empty() && (s.back() == 'K' || s.back() == 'k')) mult = 1 << 10;
  if (!s.empty() && (s.back() == 'M' || s.back() == 'm')) mult = 1 << 20;
  if (!s.empty() && (s.back() == 'G' || s.back() == 'g')) mult = 1 << 30;
  if (mult != 1) s.remove_suffix(1);
  uint64_t v = 0;
  if (!absl::SimpleAtoi(s, &v)) return false;
  *out = v * mult;
  return true;
}

// A comma-separated list of positive sizes; kInvalidArgument naming `flag`.
absl::StatusOr<std::vector<uint64_t>> ParseSizes(const std::string& flag,
                                                 const std::string& value) {
  std::vector<uint64_t> out;
  for (absl::string_view part : absl::StrSplit(value, ',', absl::SkipEmpty())) {
    uint64_t v = 0;
    if (!ParseSize(part, &v) || v == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": \"", part, "\" is not a size"));
    }
    out.push_back(v);
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": empty"));
  }
  return out;
}

// The first size of a size-list flag.
absl::StatusOr<uint64_t> ParseOneSize(const std::string& flag,
                                      const std::string& value) {
  PS_ASSIGN_OR_RETURN(std::vector<uint64_t> sizes, ParseSizes(flag, value));
  return sizes[0];
}

// Applies the PsClientOptions flags.
absl::Status ParseClientFlags(PsClientOptions* o) {
  if (!absl::GetFlag(FLAGS_max_request_bytes).empty()) {
    uint64_t v = 0;
    if (!ParseSize(absl::GetFlag(FLAGS_max_request_bytes), &v) || v == 0) {
      return absl::InvalidArgumentError("--max_request_bytes: not a size");
    }
    o->max_request_bytes = v;
  }
  if (absl::GetFlag(FLAGS_inflight_per_shard) > 0) {
    o->max_inflight_per_shard = absl::GetFlag(FLAGS_inflight_per_shard);
  }
  if (absl::GetFlag(FLAGS_channels_per_shard) > 0) {
    o->channels_per_shard = absl::GetFlag(FLAGS_channels_per_shard);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ConsistencyMode>> ParseModes() {
  std::vector<ConsistencyMode> modes;
  for (absl::string_view m :
       absl::StrSplit(absl::GetFlag(FLAGS_modes), ',', absl::SkipEmpty())) {
    if (m == "asp") {
      modes.push_back(ASP);
    } else if (m == "bsp") {
      modes.push_back(BSP);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--modes: \"", m, "\" is not asp or bsp"));
    }
  }
  if (modes.empty()) return absl::InvalidArgumentError("--modes: empty");
  return modes;
}

// The selected mode's options, from the flags, and the run's time limit.
struct Plan {
  std::string mode;
  TransportOptions transport;
  ApplyOptions apply;
  LoadOptions load;
  SparseBenchOptions sparse;
  absl::Duration limit;
};

absl::Status ParseTransportFlags(int clients, double seconds, Plan* plan) {
  TransportOptions& t = plan->transport;
  PS_ASSIGN_OR_RETURN(t.sizes, ParseSizes("sizes", absl::GetFlag(FLAGS_sizes)));
  PS_ASSIGN_OR_RETURN(
      t.partition_bytes,
      ParseOneSize("partition_bytes", absl::GetFlag(FLAGS_partition_bytes)));
  PS_ASSIGN_OR_RETURN(t.modes, ParseModes());
  if (clients > 0) t.clients = clients;
  if (seconds > 0) t.duration = absl::Seconds(seconds);
  t.measure_tcp = absl::GetFlag(FLAGS_tcp);
  t.use_iperf3 = absl::GetFlag(FLAGS_iperf3);
  if (absl::GetFlag(FLAGS_tcp_buffer_bytes) != "0") {
    PS_ASSIGN_OR_RETURN(t.tcp_buffer_bytes,
                        ParseOneSize("tcp_buffer_bytes",
                                     absl::GetFlag(FLAGS_tcp_buffer_bytes)));
  }
  PS_RETURN_IF_ERROR(ParseClientFlags(&t.client));
  // Per point: registration, the measured time, a BSP straggler's step
  // deadline, and the raw TCP runs (each bounded by the duration + 5 s).
  plan->limit =
      (t.modes.size() * t.sizes.size()) * (3 * t.duration + absl::Seconds(60)) +
      absl::Seconds(60);
  return absl::OkStatus();
}

absl::Status ParseApplyFlags(Plan* plan) {
  PS_ASSIGN_OR_RETURN(plan->apply.floats,
                      ParseSizes("floats", absl::GetFlag(FLAGS_floats)));
  plan->limit = plan->apply.floats.size() * absl::Seconds(120);
  return absl::OkStatus();
}

absl::Status ParseLoadFlags(int clients, double seconds, Plan* plan) {
  LoadOptions& l = plan->load;
  if (clients > 0) l.clients = clients;
  if (seconds > 0) l.duration = absl::Seconds(seconds);
  if (absl::GetFlag(FLAGS_warmup_seconds) < 0) {
    return absl::InvalidArgumentError("--warmup_seconds must be >= 0");
  }
  l.warmup = absl::Seconds(absl::GetFlag(FLAGS_warmup_seconds));
  l.max_rss_growth = absl::GetFlag(FLAGS_max_rss_growth);
  PS_ASSIGN_OR_RETURN(
      l.bytes, ParseOneSize("load_bytes", absl::GetFlag(FLAGS_load_bytes)));
  PS_RETURN_IF_ERROR(ParseClientFlags(&l.client));
  plan->limit = l.warmup + l.duration + absl::Seconds(120);
  return absl::OkStatus();
}

absl::Status ParseSparseFlags(int clients, double seconds, Plan* plan) {
  SparseBenchOptions& o = plan->sparse;
  PS_ASSIGN_OR_RETURN(o.rows, ParseSizes("rows", absl::GetFlag(FLAGS_rows)));
  PS_ASSIGN_OR_RETURN(o.universe,
                      ParseOneSize("universe", absl::GetFlag(FLAGS_universe)));
  if (absl::GetFlag(FLAGS_dim) < 1) {
    return absl::InvalidArgumentError("--dim: must be >= 1");
  }
  o.dim = static_cast<uint32_t>(absl::GetFlag(FLAGS_dim));
  const std::string opt = absl::GetFlag(FLAGS_table_optimizer);
  if (opt == "sgd") {
    o.optimizer = SGD;
  } else if (opt == "adagrad") {
    o.optimizer = ADAGRAD;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--table_optimizer: \"", opt, "\" is not sgd or adagrad"));
  }
  o.populate = absl::GetFlag(FLAGS_populate);
  o.dense = absl::GetFlag(FLAGS_dense);
  if (absl::GetFlag(FLAGS_repetitions) < 1) {
    return absl::InvalidArgumentError("--repetitions: must be >= 1");
  }
  o.repetitions = absl::GetFlag(FLAGS_repetitions);
  if (clients > 0) o.clients = clients;
  if (seconds > 0) o.duration = absl::Seconds(seconds);
  PS_RETURN_IF_ERROR(ParseClientFlags(&o.client));
  // Per point: registration and populating, then every run bounded by its
  // duration plus a step's deadline.
  plan->limit =
      o.rows.size() * (2 * o.repetitions * (o.duration + absl::Seconds(30)) +
                       absl::Seconds(120));
  return absl::OkStatus();
}

// kInvalidArgument naming the flag when a flag is bad.
absl::StatusOr<Plan> ParseFlags() {
  Plan plan;
  plan.mode = absl::GetFlag(FLAGS_mode);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const int clients = absl::GetFlag(FLAGS_clients);
  if (seconds < 0 || clients < 0) {
    return absl::InvalidArgumentError("--seconds and --clients must be >= 0");
  }
  if (plan.mode == "transport") {
    PS_RETURN_IF_ERROR(ParseTransportFlags(clients, seconds, &plan));
  } else if (plan.mode == "apply") {
    PS_RETURN_IF_ERROR(ParseApplyFlags(&plan));
  } else if (plan.mode == "load") {
    PS_RETURN_IF_ERROR(ParseLoadFlags(clients, seconds, &plan));
  } else if (plan.mode == "sparse") {
    PS_RETURN_IF_ERROR(ParseSparseFlags(clients, seconds, &plan));
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--mode: \"", plan.mode, "\" is not transport, apply, load or sparse"));
  }
  if (absl::GetFlag(FLAGS_time_limit_seconds) > 0) {
    plan.limit = absl::Seconds(absl::GetFlag(FLAGS_time_limit_seconds));
  }
  return plan;
}

// Bounds the whole run: a hang anywhere ends the process (exit 4) once
// `limit` passes before the Watchdog is destroyed.
class Watchdog {
 public:
  explicit Watchdog(absl::Duration limit)
      : thread_([this, limit] {
          if (!finished_.WaitForNotificationWithTimeout(limit)) {
            std::cerr << "psbench: time limit of "
                      << absl::FormatDuration(limit) << " passed\n";
            std::_Exit(kExitTimeout);
          }
        }) {}
  ~Watchdog() {
    finished_.Notify();
    thread_.join();
  }

 private:
  absl::Notification finished_;
  std::thread thread_;
};

// Prints a setup failure; kExitSetup.
int SetupFailed(const absl::Status& s) {
  std::cerr << "psbench: " << s << "\n";
  return kExitSetup;
}

int RunApplyMode(const ApplyOptions& options, bool json) {
  absl::StatusOr<ApplyReport> r = RunApply(options);
  if (!r.ok()) return SetupFailed(r.status());
  std::cout << (json ? ApplyJson(*r) + "\n" : FormatApply(*r));
  return 0;
}

int RunTransportMode(const BenchCluster& cluster,
                     const TransportOptions& options, bool json) {
  absl::StatusOr<TransportReport> r = RunTransport(cluster, options);
  if (!r.ok()) return SetupFailed(r.status());
  std::cout << (json ? TransportJson(*r) + "\n" : FormatTransport(*r));
  for (const TransportPoint& p : r->points) {
    if (p.errors > 0) return kExitBar;
  }
  return 0;
}

int RunLoadMode(const BenchCluster& cluster, const LoadOptions& options,
                bool json) {
  absl::StatusOr<LoadReport> r = RunLoad(cluster, options);
  if (!r.ok()) return SetupFailed(r.status());
  std::cout << (json ? LoadJson(*r) + "\n" : FormatLoad(*r));
  return r->pass ? 0 : kExitBar;
}

int RunSparseMode(const BenchCluster& cluster,
                  const SparseBenchOptions& options, bool json) {
  absl::StatusOr<SparseBenchReport> r = RunSparseBench(cluster, options);
  if (!r.ok()) return SetupFailed(r.status());
  std::cout << (json ? SparseBenchJson(*r) + "\n" : FormatSparseBench(*r));
  for (const SparseBenchPoint& p : r->points) {
    if (p.sparse.errors > 0 || p.dense.errors > 0) return kExitBar;
  }
  return 0;
}

int Run() {
  absl::StatusOr<Plan> plan = ParseFlags();
  if (!plan.ok()) {
    std::cerr << "psbench: " << plan.status().message() << "\n";
    return kExitUsage;
  }
  const bool json = absl::GetFlag(FLAGS_json);
  Watchdog watchdog(plan->limit);
  if (plan->mode == "apply") return RunApplyMode(plan->apply, json);
  absl::StatusOr<std::unique_ptr<BenchCluster>> cluster =
      absl::GetFlag(FLAGS_cluster).empty()
          ? BenchCluster::StartInProcess(absl::GetFlag(FLAGS_shards))
          : BenchCluster::Connect(absl::GetFlag(FLAGS_cluster),
                                  absl::Seconds(30));
  if (!cluster.ok()) return SetupFailed(cluster.status());
  if (plan->mode == "transport") {
    return RunTransportMode(**cluster, plan->transport, json);
  }
  if (plan->mode == "sparse") {
    return RunSparseMode(**cluster, plan->sparse, json);
  }
  return RunLoadMode(**cluster, plan->load, json);
}

}  // namespace
}  // namespace bench
}  // namespace ps

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "parameter-server benchmarks: --mode=transport|apply|load|sparse (see "
      "tools/psbench/psbench.cc)");
  ps::TuneProcessForThroughput();  // as psd and workerd do
  absl::ParseCommandLine(argc, argv);
  return ps::bench::Run();
}
