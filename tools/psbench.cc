// psbench: transport, optimizer-apply and load benchmarks of the parameter
// server (see tools/psbench_lib.h for what each mode measures).
//
//   psbench --mode=transport [--sizes=4K,64K,1M,4M,16M,64M] [--modes=asp,bsp]
//           [--clients=2] [--shards=2 | --cluster=FILE] [--seconds=3]
//   psbench --mode=apply [--floats=1M,4M,16M,64M]
//   psbench --mode=load [--clients=64] [--seconds=60] [--warmup_seconds=5]
//   common: --json (one JSON object on stdout), --time_limit_seconds
//
// Exit codes: 0 done; 1 the run failed its bar (load: errors or resident
// memory growth >= 10%; transport: any step error); 2 bad flags; 3 setup
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
#include "tools/psbench_cluster.h"
#include "tools/psbench_lib.h"

ABSL_FLAG(std::string, mode, "transport", "transport, apply or load");
ABSL_FLAG(std::string, cluster, "",
          "cluster file of a running cluster (default: start shards in this "
          "process)");
ABSL_FLAG(int, shards, 2, "in-process shards (transport, load)");
ABSL_FLAG(
    int, clients, 0,
    "client threads, each its own PsClient (default: transport 2, load 64)");
ABSL_FLAG(std::string, sizes, "4K,64K,1M,4M,16M,64M",
          "transport: tensor sizes in bytes (K/M suffixes)");
ABSL_FLAG(std::string, modes, "asp,bsp",
          "transport: consistency modes, asp and/or bsp");
ABSL_FLAG(double, seconds, 0,
          "measured seconds per transport point (default 3) or of the load run "
          "(default 60)");
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
ABSL_FLAG(bool, json, false, "print one JSON object instead of tables");
ABSL_FLAG(double, time_limit_seconds, 0,
          "abort (exit 4) after this long (default: from the mode's options)");

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

bool ParseSizes(const std::string& flag, const std::string& value,
                std::vector<uint64_t>* out) {
  out->clear();
  for (absl::string_view part : absl::StrSplit(value, ',', absl::SkipEmpty())) {
    uint64_t v = 0;
    if (!ParseSize(part, &v) || v == 0) {
      std::cerr << "psbench: --" << flag << ": \"" << part
                << "\" is not a size\n";
      return false;
    }
    out->push_back(v);
  }
  if (out->empty()) std::cerr << "psbench: --" << flag << ": empty\n";
  return !out->empty();
}

// Applies the PsClientOptions flags; false (after a message) on bad values.
bool ClientOptions(ps::PsClientOptions* o) {
  if (!absl::GetFlag(FLAGS_max_request_bytes).empty()) {
    uint64_t v = 0;
    if (!ParseSize(absl::GetFlag(FLAGS_max_request_bytes), &v) || v == 0) {
      std::cerr << "psbench: --max_request_bytes: not a size\n";
      return false;
    }
    o->max_request_bytes = v;
  }
  if (absl::GetFlag(FLAGS_inflight_per_shard) > 0) {
    o->max_inflight_per_shard = absl::GetFlag(FLAGS_inflight_per_shard);
  }
  if (absl::GetFlag(FLAGS_channels_per_shard) > 0) {
    o->channels_per_shard = absl::GetFlag(FLAGS_channels_per_shard);
  }
  return true;
}

int Run() {
  const std::string mode = absl::GetFlag(FLAGS_mode);
  const bool json = absl::GetFlag(FLAGS_json);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  int clients = absl::GetFlag(FLAGS_clients);
  if (seconds < 0 || clients < 0) {
    std::cerr << "psbench: --seconds and --clients must be >= 0\n";
    return kExitUsage;
  }
  ps::bench::TransportOptions transport;
  ps::bench::ApplyOptions apply;
  ps::bench::LoadOptions load;
  absl::Duration limit;
  if (mode == "transport") {
    if (!ParseSizes("sizes", absl::GetFlag(FLAGS_sizes), &transport.sizes))
      return kExitUsage;
    std::vector<uint64_t> partition;
    if (!ParseSizes("partition_bytes", absl::GetFlag(FLAGS_partition_bytes),
                    &partition)) {
      return kExitUsage;
    }
    transport.partition_bytes = partition[0];
    transport.modes.clear();
    for (absl::string_view m :
         absl::StrSplit(absl::GetFlag(FLAGS_modes), ',', absl::SkipEmpty())) {
      if (m == "asp") {
        transport.modes.push_back(ps::ASP);
      } else if (m == "bsp") {
        transport.modes.push_back(ps::BSP);
      } else {
        std::cerr << "psbench: --modes: \"" << m << "\" is not asp or bsp\n";
        return kExitUsage;
      }
    }
    if (transport.modes.empty()) {
      std::cerr << "psbench: --modes: empty\n";
      return kExitUsage;
    }
    if (clients > 0) transport.clients = clients;
    if (seconds > 0) transport.duration = absl::Seconds(seconds);
    transport.measure_tcp = absl::GetFlag(FLAGS_tcp);
    transport.use_iperf3 = absl::GetFlag(FLAGS_iperf3);
    if (absl::GetFlag(FLAGS_tcp_buffer_bytes) != "0") {
      std::vector<uint64_t> buffer;
      if (!ParseSizes("tcp_buffer_bytes", absl::GetFlag(FLAGS_tcp_buffer_bytes),
                      &buffer)) {
        return kExitUsage;
      }
      transport.tcp_buffer_bytes = buffer[0];
    }
    if (!ClientOptions(&transport.client)) return kExitUsage;
    // Per point: registration, the measured time, a BSP straggler's step
    // deadline, and the raw TCP runs (each bounded by the duration + 5 s).
    limit = (transport.modes.size() * transport.sizes.size()) *
                (3 * transport.duration + absl::Seconds(60)) +
            absl::Seconds(60);
  } else if (mode == "apply") {
    if (!ParseSizes("floats", absl::GetFlag(FLAGS_floats), &apply.floats))
      return kExitUsage;
    limit = apply.floats.size() * absl::Seconds(120);
  } else if (mode == "load") {
    if (clients > 0) load.clients = clients;
    if (seconds > 0) load.duration = absl::Seconds(seconds);
    if (absl::GetFlag(FLAGS_warmup_seconds) < 0) {
      std::cerr << "psbench: --warmup_seconds must be >= 0\n";
      return kExitUsage;
    }
    load.warmup = absl::Seconds(absl::GetFlag(FLAGS_warmup_seconds));
    load.max_rss_growth = absl::GetFlag(FLAGS_max_rss_growth);
    std::vector<uint64_t> bytes;
    if (!ParseSizes("load_bytes", absl::GetFlag(FLAGS_load_bytes), &bytes))
      return kExitUsage;
    load.bytes = bytes[0];
    if (!ClientOptions(&load.client)) return kExitUsage;
    limit = load.warmup + load.duration + absl::Seconds(120);
  } else {
    std::cerr << "psbench: --mode: \"" << mode
              << "\" is not transport, apply or load\n";
    return kExitUsage;
  }
  if (absl::GetFlag(FLAGS_time_limit_seconds) > 0) {
    limit = absl::Seconds(absl::GetFlag(FLAGS_time_limit_seconds));
  }

  // The whole run is bounded: a hang anywhere ends the process.
  absl::Notification finished;
  std::thread watchdog([&finished, limit] {
    if (!finished.WaitForNotificationWithTimeout(limit)) {
      std::cerr << "psbench: time limit of " << absl::FormatDuration(limit)
                << " passed\n";
      std::_Exit(kExitTimeout);
    }
  });
  struct Joiner {
    absl::Notification* n;
    std::thread* t;
    ~Joiner() {
      n->Notify();
      t->join();
    }
  } joiner{&finished, &watchdog};

  if (mode == "apply") {
    absl::StatusOr<ps::bench::ApplyReport> r = ps::bench::RunApply(apply);
    if (!r.ok()) {
      std::cerr << "psbench: " << r.status() << "\n";
      return kExitSetup;
    }
    std::cout << (json ? ps::bench::ApplyJson(*r) + "\n"
                       : ps::bench::FormatApply(*r));
    return 0;
  }

  absl::StatusOr<std::unique_ptr<ps::bench::BenchCluster>> cluster =
      absl::GetFlag(FLAGS_cluster).empty()
          ? ps::bench::BenchCluster::StartInProcess(absl::GetFlag(FLAGS_shards))
          : ps::bench::BenchCluster::Connect(absl::GetFlag(FLAGS_cluster),
                                             absl::Seconds(30));
  if (!cluster.ok()) {
    std::cerr << "psbench: " << cluster.status() << "\n";
    return kExitSetup;
  }
  if (mode == "transport") {
    absl::StatusOr<ps::bench::TransportReport> r =
        ps::bench::RunTransport(**cluster, transport);
    if (!r.ok()) {
      std::cerr << "psbench: " << r.status() << "\n";
      return kExitSetup;
    }
    std::cout << (json ? ps::bench::TransportJson(*r) + "\n"
                       : ps::bench::FormatTransport(*r));
    for (const ps::bench::TransportPoint& p : r->points) {
      if (p.errors > 0) return kExitBar;
    }
    return 0;
  }
  absl::StatusOr<ps::bench::LoadReport> r = ps::bench::RunLoad(**cluster, load);
  if (!r.ok()) {
    std::cerr << "psbench: " << r.status() << "\n";
    return kExitSetup;
  }
  std::cout << (json ? ps::bench::LoadJson(*r) + "\n"
                     : ps::bench::FormatLoad(*r));
  return r->pass ? 0 : kExitBar;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "parameter-server benchmarks: --mode=transport|apply|load (see "
      "tools/psbench.cc)");
  ps::TuneProcessForThroughput();  // as psd and workerd do
  absl::ParseCommandLine(argc, argv);
  return Run();
}
