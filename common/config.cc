#include "common/config.h"

#include <cmath>
#include <filesystem>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/text_proto.h"

namespace ps {
namespace {

// Accumulates every problem of one file.
class Problems {
 public:
  explicit Problems(std::string name) : name_(std::move(name)) {}
  void Add(const std::string& field, const std::string& reason) {
    list_.push_back(absl::StrCat(name_, ": ", field, ": ", reason));
  }
  void Add(const absl::Status& status) {
    if (!status.ok()) list_.push_back(absl::StrCat(name_, ": ", status.message()));
  }
  absl::Status ToStatus() const {
    if (list_.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrJoin(list_, "\n"));
  }

 private:
  std::string name_;
  std::vector<std::string> list_;
};

bool ValidLogLevel(const std::string& level) {
  static const char* const kLevels[] = {"",     "trace", "debug", "info",
                                        "warn", "error", "off"};
  for (const char* l : kLevels) {
    if (level == l) return true;
  }
  return false;
}

void ValidateTls(const TlsConfig& tls, const std::string& base, Problems* p) {
  bool any = !tls.cert_file().empty() || !tls.key_file().empty() ||
             !tls.ca_file().empty() || tls.mutual();
  if (!any) return;
  if (tls.ca_file().empty()) p->Add("tls.ca_file", "required when TLS is on");
  if (tls.cert_file().empty() != tls.key_file().empty()) {
    p->Add("tls.cert_file", "cert_file and key_file go together");
  }
  if (tls.mutual() && tls.cert_file().empty()) {
    p->Add("tls.cert_file", "required for mutual TLS");
  }
  for (const auto& [field, path] :
       {std::pair<std::string, std::string>{"tls.cert_file", tls.cert_file()},
        {"tls.key_file", tls.key_file()},
        {"tls.ca_file", tls.ca_file()}}) {
    if (!path.empty() && !std::filesystem::exists(ResolvePath(path, base))) {
      p->Add(field, absl::StrCat("no such file: ", ResolvePath(path, base)));
    }
  }
}

void ResolveTlsPaths(TlsConfig* tls, const std::string& base) {
  tls->set_cert_file(ResolvePath(tls->cert_file(), base));
  tls->set_key_file(ResolvePath(tls->key_file(), base));
  tls->set_ca_file(ResolvePath(tls->ca_file(), base));
}

absl::StatusOr<std::string> ResolveShard(const LoadedCluster& cluster,
                                         uint32_t shard, absl::Time deadline) {
  const ShardAddress& a = cluster.config.shards(shard);
  if (!a.address().empty()) return a.address();
  std::string file = ResolvePath(a.address_file(), cluster.path);
  // Polls: the file appears when a daemon in another process binds, and
  // there is no portable event to wait on across processes.
  absl::Duration backoff = absl::Milliseconds(10);
  while (true) {
    std::string contents;
    if (ReadFile(file, &contents).ok()) {
      std::string address(absl::StripAsciiWhitespace(contents));
      if (!address.empty()) {
        absl::Status valid = ValidateHostPort(
            address, absl::StrCat("shards[", shard, "].address_file ", file),
            /*allow_port_zero=*/false);
        if (!valid.ok()) return valid;
        return address;
      }
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "shards[", shard, "].address_file: ", file,
          " not written (is psd shard ", shard, " running?)"));
    }
    std::this_thread::sleep_for(absl::ToChronoMilliseconds(backoff));
    backoff = std::min(backoff * 2, absl::Milliseconds(200));
  }
}

}  // namespace

absl::Status ValidateHostPort(const std::string& address,
                              const std::string& field, bool allow_port_zero) {
  size_t colon = address.rfind(':');
  if (address.empty() || colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": \"", address, "\" is not host:port"));
  }
  std::string host = address.substr(0, colon);
  if (host.front() == '[' && host.back() != ']') {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": \"", address, "\" has an unclosed [IPv6]"));
  }
  uint32_t port = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port > 65535 ||
      (port == 0 && !allow_port_zero)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": \"", address, "\" has no valid port (1-65535",
        allow_port_zero ? ", or 0 for any free port" : "", ")"));
  }
  return absl::OkStatus();
}

absl::Status ValidateClusterConfig(const ClusterConfig& config,
                                   const std::string& name) {
  Problems p(name);
  if (config.shards_size() == 0) p.Add("shards", "at least one shard required");
  for (int i = 0; i < config.shards_size(); ++i) {
    const ShardAddress& s = config.shards(i);
    std::string field = absl::StrCat("shards[", i, "]");
    if (s.address().empty() == s.address_file().empty()) {
      p.Add(field, "set exactly one of address and address_file");
    } else if (!s.address().empty()) {
      p.Add(ValidateHostPort(s.address(), field + ".address", false));
    }
  }
  if (config.shards_size() > 0 &&
      config.coordinator_shard() >= static_cast<uint32_t>(config.shards_size())) {
    p.Add("coordinator_shard",
          absl::StrCat(config.coordinator_shard(), " is not a shard index (",
                       config.shards_size(), " shards)"));
  }
  ValidateTls(config.tls(), name, &p);
  if (!config.auth_token_file().empty() &&
      !std::filesystem::exists(ResolvePath(config.auth_token_file(), name))) {
    p.Add("auth_token_file", absl::StrCat("no such file: ", ResolvePath(config.auth_token_file(), name)));
  }
  return p.ToStatus();
}

absl::StatusOr<LoadedCluster> LoadClusterConfig(const std::string& path) {
  LoadedCluster out;
  out.path = path;
  absl::Status s = ParseTextProtoFile(path, &out.config);
  if (!s.ok()) return s;
  s = ValidateClusterConfig(out.config, path);
  if (!s.ok()) return s;
  ResolveTlsPaths(out.config.mutable_tls(), path);
  out.config.set_auth_token_file(ResolvePath(out.config.auth_token_file(), path));
  return out;
}

absl::StatusOr<LoadedPsdConfig> LoadPsdConfig(const std::string& path) {
  LoadedPsdConfig out;
  out.path = path;
  PsdConfig& c = out.psd;
  absl::Status s = ParseTextProtoFile(path, &c);
  if (!s.ok()) return s;
  Problems p(path);
  if (c.listen_address().empty()) c.set_listen_address(kDefaultListenAddress);
  p.Add(ValidateHostPort(c.listen_address(), "listen_address", true));
  if (c.max_message_bytes() == 0) c.set_max_message_bytes(kDefaultMaxMessageBytes);
  if (c.max_message_bytes() < (64u << 10)) {
    p.Add("max_message_bytes", "must be at least 65536");
  }
  if (c.memory_budget_bytes() == 0) c.set_memory_budget_bytes(kDefaultMemoryBudgetBytes);
  if (c.worker_timeout_ms() == 0) c.set_worker_timeout_ms(kDefaultWorkerTimeoutMs);
  if (!ValidLogLevel(c.log_level())) {
    p.Add("log_level", absl::StrCat("unknown level \"", c.log_level(),
                                    "\" (trace, debug, info, warn, error, off)"));
  }
  if (c.cluster_file().empty()) {
    p.Add("cluster_file", "required");
    return p.ToStatus();
  }
  c.set_cluster_file(ResolvePath(c.cluster_file(), path));
  c.set_address_file(ResolvePath(c.address_file(), path));
  c.set_checkpoint_dir(ResolvePath(c.checkpoint_dir(), path));
  if (absl::Status ps = p.ToStatus(); !ps.ok()) return ps;
  absl::StatusOr<LoadedCluster> cluster = LoadClusterConfig(c.cluster_file());
  if (!cluster.ok()) return cluster.status();
  out.cluster = *std::move(cluster);
  if (c.shard_id() >= static_cast<uint32_t>(out.cluster.config.shards_size())) {
    p.Add("shard_id", absl::StrCat(c.shard_id(), " is not in the cluster file (",
                                   out.cluster.config.shards_size(), " shards)"));
  }
  if (absl::Status ps = p.ToStatus(); !ps.ok()) return ps;
  return out;
}

absl::StatusOr<LoadedWorkerdConfig> LoadWorkerdConfig(const std::string& path) {
  LoadedWorkerdConfig out;
  out.path = path;
  WorkerdConfig& c = out.workerd;
  absl::Status s = ParseTextProtoFile(path, &c);
  if (!s.ok()) return s;
  Problems p(path);
  if (c.cluster_file().empty()) p.Add("cluster_file", "required");
  if (c.devices_size() == 0) c.add_devices("cpu:0");
  for (int i = 0; i < c.devices_size(); ++i) {
    const std::string& d = c.devices(i);
    size_t colon = d.find(':');
    uint32_t index = 0;
    std::string kind = d.substr(0, colon);
    if (colon == std::string::npos || (kind != "cpu" && kind != "gpu") ||
        !absl::SimpleAtoi(d.substr(colon + 1), &index)) {
      p.Add(absl::StrCat("devices[", i, "]"),
            absl::StrCat("\"", d, "\" is not cpu:N or gpu:N"));
    }
    for (int j = 0; j < i; ++j) {
      if (c.devices(j) == d) {
        p.Add(absl::StrCat("devices[", i, "]"), absl::StrCat("\"", d, "\" listed twice"));
      }
    }
  }
  if (c.device_weights_size() != 0 && c.device_weights_size() != c.devices_size()) {
    p.Add("device_weights", absl::StrCat(c.device_weights_size(), " weights for ",
                                         c.devices_size(), " devices"));
  }
  for (int i = 0; i < c.device_weights_size(); ++i) {
    float w = c.device_weights(i);
    if (!(w > 0) || !std::isfinite(w)) {
      p.Add(absl::StrCat("device_weights[", i, "]"), "must be a positive number");
    }
  }
  if (c.device_weights_size() == 0) {
    for (int i = 0; i < c.devices_size(); ++i) c.add_device_weights(1.0f);
  }
  if (c.threads_per_device() == 0) c.set_threads_per_device(1);
  if (c.loader_threads() == 0) c.set_loader_threads(1);
  if (c.prefetch_batches() == 0) c.set_prefetch_batches(4);
  if (c.heartbeat_interval_ms() == 0) c.set_heartbeat_interval_ms(1000);
  if (c.rpc_deadline_ms() == 0) c.set_rpc_deadline_ms(30000);
  if (c.rpc_max_attempts() == 0) c.set_rpc_max_attempts(8);
  if (c.max_inflight_per_shard() == 0) c.set_max_inflight_per_shard(4);
  if (c.data_dir().empty()) c.set_data_dir("/usr/share/datasets/fashion-mnist");
  if (!ValidLogLevel(c.log_level())) {
    p.Add("log_level", absl::StrCat("unknown level \"", c.log_level(), "\""));
  }
  if (absl::Status ps = p.ToStatus(); !ps.ok()) return ps;
  c.set_cluster_file(ResolvePath(c.cluster_file(), path));
  c.set_data_dir(ResolvePath(c.data_dir(), path));
  absl::StatusOr<LoadedCluster> cluster = LoadClusterConfig(c.cluster_file());
  if (!cluster.ok()) return cluster.status();
  out.cluster = *std::move(cluster);
  return out;
}

absl::StatusOr<std::vector<std::string>> ResolveShardAddresses(
    const LoadedCluster& cluster, absl::Time deadline) {
  std::vector<std::string> out;
  for (int i = 0; i < cluster.config.shards_size(); ++i) {
    absl::StatusOr<std::string> a = ResolveShard(cluster, i, deadline);
    if (!a.ok()) return a.status();
    out.push_back(*std::move(a));
  }
  return out;
}

absl::StatusOr<std::string> ResolveCoordinatorAddress(
    const LoadedCluster& cluster, absl::Time deadline) {
  return ResolveShard(cluster, cluster.config.coordinator_shard(), deadline);
}

}  // namespace ps
