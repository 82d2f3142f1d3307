// Loading and validating the daemons' configuration files.
//
//   absl::StatusOr<ps::LoadedPsdConfig> c = ps::LoadPsdConfig("configs/local/psd0.pbtxt");
//   if (!c.ok()) { std::cerr << c.status().message(); return 2; }
//   // c->psd has defaults filled in; c->cluster is the cluster file it names.
//
// Every problem is reported as "<file>: <field>: <reason>" (or, for syntax,
// "<file>:<line>:<col>: <reason>"), so the user knows what to fix.
#ifndef COMMON_CONFIG_H_
#define COMMON_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/cluster.pb.h"

namespace ps {

// Defaults documented in proto/cluster.proto.
inline constexpr char kDefaultListenAddress[] = "127.0.0.1:0";
inline constexpr uint32_t kDefaultMaxMessageBytes = 4u << 20;
inline constexpr uint64_t kDefaultMemoryBudgetBytes = 8ull << 30;
inline constexpr uint32_t kDefaultWorkerTimeoutMs = 10000;

struct LoadedCluster {
  std::string path;  // the cluster file
  ClusterConfig config;
};

struct LoadedPsdConfig {
  std::string path;
  PsdConfig psd;  // defaults filled, paths resolved
  LoadedCluster cluster;
};

struct LoadedWorkerdConfig {
  std::string path;
  WorkerdConfig workerd;  // defaults filled, paths resolved
  LoadedCluster cluster;
};

// Checks "host:port" (host may be a name, IPv4 or [IPv6]); port in
// [0, 65535], and > 0 unless allow_port_zero. `field` names it in errors.
absl::Status ValidateHostPort(const std::string& address,
                              const std::string& field, bool allow_port_zero);

absl::StatusOr<LoadedCluster> LoadClusterConfig(const std::string& path);
absl::StatusOr<LoadedPsdConfig> LoadPsdConfig(const std::string& path);
absl::StatusOr<LoadedWorkerdConfig> LoadWorkerdConfig(const std::string& path);

// Validation alone (also used on configs built in code). `name` prefixes
// every problem; all problems are returned, one per line.
absl::Status ValidateClusterConfig(const ClusterConfig& config,
                                   const std::string& name);

// The "host:port" of every shard, in shard order. Address files are read
// (relative to the cluster file) and waited for until `deadline`: a shard
// started on port 0 writes its file once it listens. DeadlineExceeded names
// the files still missing.
absl::StatusOr<std::vector<std::string>> ResolveShardAddresses(
    const LoadedCluster& cluster, absl::Time deadline);

// The coordinator's "host:port" (see ResolveShardAddresses).
absl::StatusOr<std::string> ResolveCoordinatorAddress(
    const LoadedCluster& cluster, absl::Time deadline);

}  // namespace ps

#endif  // COMMON_CONFIG_H_
