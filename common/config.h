// Loading and validating the daemons' configuration files.
//
//   absl::StatusOr<ps::LoadedPsdConfig> c =
//   ps::LoadPsdConfig("configs/local/psd0.pbtxt"); if (!c.ok()) { std::cerr <<
//   c.status().message(); return 2; }
//   // c->psd has defaults filled in; c->cluster is the cluster file it names.
//
// Every problem is reported as "<file>: <field>: <reason>" (or, for syntax,
// "<file>:<line>:<col>: <reason>"), so the user knows what to fix. Loading
// checks everything a daemon would otherwise trip over later (an unreadable
// TLS file, an empty token, an address_file in a missing folder), so a bad
// configuration stops every daemon and psctl at start, with exit code 2.
//
// Thread safety: every function is thread-safe (they share no state).
// Blocking: the Load* and Parse* functions read files; ResolveShardAddresses
// waits for address files up to its deadline.
#ifndef COMMON_CONFIG_H_
#define COMMON_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/defaults.h"  // the defaults that loading fills in
#include "proto/cluster.pb.h"

namespace ps {

// Limits on values that would otherwise break a daemon at run time.
// gRPC takes message sizes as int: larger values would wrap to "unlimited".
inline constexpr uint32_t kMinMaxMessageBytes = 64u << 10;
inline constexpr uint32_t kMaxMaxMessageBytes = 1u << 30;
// The coordinator expects heartbeats every max(100 ms, timeout / 10): a
// shorter timeout would declare every worker lost between two heartbeats.
inline constexpr uint32_t kMinWorkerTimeoutMs = 200;
// PsdConfig.progress_history_rows: thinning needs a few rows to work on; a
// million rows of a few dozen bytes each bound one job's history.
inline constexpr uint32_t kMinProgressHistoryRows = 16;
inline constexpr uint32_t kMaxProgressHistoryRows = 1000000;
// An address file holds one "host:port" line; anything longer is not one.
inline constexpr size_t kMaxAddressFileBytes = 4096;
// PsdConfig.shard_address_refresh_ms, WorkerdConfig.shard_locate_interval_ms:
// faster would spin on the file system or the coordinator; slower would
// leave a moved shard unfound longer than the workers' retries last.
inline constexpr uint32_t kMinShardIntervalMs = 10;
inline constexpr uint32_t kMaxShardIntervalMs = 60000;
// PsdConfig.shard_heartbeat_misses: more would leave a dead shard's chunks
// unserved for longer than the workers' retries last.
inline constexpr uint32_t kMaxShardHeartbeatMisses = 100;
// A bearer token travels as an HTTP/2 header value.
inline constexpr size_t kMaxTokenBytes = 4096;

struct LoadedCluster {
  std::string path;  // the cluster file
  ClusterConfig config;
};

struct LoadedPsdConfig {
  std::string path;
  PsdConfig psd;  // defaults filled, paths resolved
  LoadedCluster cluster;
  std::vector<int> cpu_cores;  // psd.cpu_cores parsed; empty: not pinned
};

struct LoadedWorkerdConfig {
  std::string path;
  WorkerdConfig workerd;  // defaults filled, paths resolved
  LoadedCluster cluster;
  std::vector<int> cpu_cores;  // workerd.cpu_cores parsed; empty: not pinned
};

// Checks "host:port": host is a name (letters, digits, '-', '.'), a dotted
// IPv4 address or a bracketed IPv6 address; port in [0, 65535], and > 0
// unless allow_port_zero. `field` names it in errors.
absl::Status ValidateHostPort(const std::string& address,
                              const std::string& field, bool allow_port_zero);

// Read the file at `path`, then as the Parse* functions below.
absl::StatusOr<LoadedCluster> LoadClusterConfig(const std::string& path);
absl::StatusOr<LoadedPsdConfig> LoadPsdConfig(const std::string& path);
absl::StatusOr<LoadedWorkerdConfig> LoadWorkerdConfig(const std::string& path);

// Parse `text` as the file `path` (named in every message; relative paths
// inside resolve against its folder), validate, fill defaults and resolve
// paths. The psd and workerd variants then load the cluster file they name
// from disk; a failure there names both files' fields.
absl::StatusOr<LoadedCluster> ParseClusterConfig(const std::string& text,
                                                 const std::string& path);
absl::StatusOr<LoadedPsdConfig> ParsePsdConfig(const std::string& text,
                                               const std::string& path);
absl::StatusOr<LoadedWorkerdConfig> ParseWorkerdConfig(const std::string& text,
                                                       const std::string& path);

// Validation alone (also used on configs built in code). `name` prefixes
// every problem and anchors relative paths; all problems are returned, one
// per line. Reads the TLS files and the token file to check them.
absl::Status ValidateClusterConfig(const ClusterConfig& config,
                                   const std::string& name);

// The "host:port" of every shard, in shard order. Address files are read
// (relative to the cluster file) and waited for until `deadline`: a shard
// started on port 0 writes its file once it listens. DeadlineExceeded names
// the files still missing; CANCELLED as soon as `stop` (optional, e.g. the
// daemon's stop request) is notified.
absl::StatusOr<std::vector<std::string>> ResolveShardAddresses(
    const LoadedCluster& cluster, absl::Time deadline,
    const absl::Notification* stop = nullptr);

// One read of shard `shard`'s address, never waiting: its `address`, or
// what its address file holds now. NotFound when the file is missing or
// empty (not written yet); InvalidArgument naming the field and the file when
// it cannot be read, is larger than kMaxAddressFileBytes or does not hold a
// "host:port"; InvalidArgument for a shard the cluster file does not list.
absl::StatusOr<std::string> ReadShardAddress(const LoadedCluster& cluster,
                                             uint32_t shard);

// The coordinator's "host:port" (see ResolveShardAddresses).
absl::StatusOr<std::string> ResolveCoordinatorAddress(
    const LoadedCluster& cluster, absl::Time deadline,
    const absl::Notification* stop = nullptr);

}  // namespace ps

#endif  // COMMON_CONFIG_H_
