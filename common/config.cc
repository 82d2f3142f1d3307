#include "common/config.h"

#include <arpa/inet.h>

#include <cmath>
#include <filesystem>
#include <system_error>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/cpu_placement.h"
#include "common/status_macros.h"
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
    if (!status.ok())
      list_.push_back(absl::StrCat(name_, ": ", status.message()));
  }
  absl::Status ToStatus() const {
    if (list_.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrJoin(list_, "\n"));
  }

 private:
  std::string name_;
  std::vector<std::string> list_;
};

bool ValidHostName(absl::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  for (absl::string_view label : absl::StrSplit(host, '.')) {
    if (label.empty() || label.size() > 63) return false;
    if (label.front() == '-' || label.back() == '-') return false;
    for (char c : label) {
      // '_' is not DNS, but /etc/hosts and container names use it.
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' &&
          c != '_') {
        return false;
      }
    }
  }
  return true;
}

bool ValidLogLevel(const std::string& level) {
  static const char* const kLevels[] = {"",     "trace", "debug", "info",
                                        "warn", "error", "off"};
  for (const char* l : kLevels) {
    if (level == l) return true;
  }
  return false;
}

// `what` is the PEM label the file must hold: "CERTIFICATE" or "PRIVATE KEY".
void ValidatePemFile(const std::string& field, const std::string& path,
                     absl::string_view what, Problems* p) {
  std::string pem;
  absl::Status read = ReadFile(path, &pem);
  if (!read.ok()) {
    p->Add(field, std::string(read.message()));
    return;
  }
  if (!absl::StrContains(pem, "-----BEGIN ")) {
    p->Add(field, absl::StrCat(path, " is not a PEM file"));
  } else if (!absl::StrContains(pem, absl::StrCat(what, "-----"))) {
    p->Add(field, absl::StrCat(path, " holds no PEM ", what));
  } else if (absl::StrContains(pem, "ENCRYPTED")) {
    p->Add(field,
           absl::StrCat(path, " is encrypted; gRPC needs the key unencrypted"));
  }
}

void ValidateTls(const TlsConfig& tls, const std::string& base, Problems* p) {
  bool any = !tls.cert_file().empty() || !tls.key_file().empty() ||
             !tls.ca_file().empty() || tls.mutual() ||
             !tls.server_name_override().empty();
  if (!any) return;
  if (tls.ca_file().empty()) p->Add("tls.ca_file", "required when TLS is on");
  if (tls.cert_file().empty() != tls.key_file().empty()) {
    p->Add("tls.cert_file", "cert_file and key_file go together");
  }
  if (tls.mutual() && tls.cert_file().empty()) {
    p->Add("tls.cert_file", "required for mutual TLS");
  }
  if (!tls.cert_file().empty()) {
    ValidatePemFile("tls.cert_file", ResolvePath(tls.cert_file(), base),
                    "CERTIFICATE", p);
  }
  if (!tls.key_file().empty()) {
    ValidatePemFile("tls.key_file", ResolvePath(tls.key_file(), base),
                    "PRIVATE KEY", p);
  }
  if (!tls.ca_file().empty()) {
    ValidatePemFile("tls.ca_file", ResolvePath(tls.ca_file(), base),
                    "CERTIFICATE", p);
  }
  if (!tls.server_name_override().empty() &&
      !ValidateHostPort(tls.server_name_override() + ":1", "", false).ok()) {
    p->Add("tls.server_name_override",
           absl::StrCat("\"", absl::CHexEscape(tls.server_name_override()),
                        "\" is not a host name"));
  }
}

void ValidateTokenFile(const std::string& path, Problems* p) {
  std::string token;
  absl::Status read = ReadFile(path, &token, kMaxTokenBytes);
  if (!read.ok()) {
    p->Add("auth_token_file", std::string(read.message()));
    return;
  }
  absl::string_view t = absl::StripAsciiWhitespace(token);
  if (t.empty()) {
    p->Add("auth_token_file", absl::StrCat(path, " is empty"));
    return;
  }
  for (size_t i = 0; i < t.size(); ++i) {
    // Visible ASCII only: the token travels as "authorization: Bearer <t>".
    if (t[i] < 0x21 || t[i] > 0x7e) {
      p->Add("auth_token_file",
             absl::StrCat(path, ": byte ", i, " of the token (0x",
                          absl::Hex(static_cast<unsigned char>(t[i])),
                          ") is not visible ASCII; a header cannot carry it"));
      return;
    }
  }
}

void ResolveTlsPaths(TlsConfig* tls, const std::string& base) {
  tls->set_cert_file(ResolvePath(tls->cert_file(), base));
  tls->set_key_file(ResolvePath(tls->key_file(), base));
  tls->set_ca_file(ResolvePath(tls->ca_file(), base));
}

// PsdConfig.shard_address_refresh_ms and shard_heartbeat_ms,
// WorkerdConfig.shard_locate_interval_ms.
void CheckShardInterval(const std::string& field, uint32_t ms, Problems* p) {
  if (ms < kMinShardIntervalMs || ms > kMaxShardIntervalMs) {
    p->Add(field, absl::StrCat("must be in [", kMinShardIntervalMs, ", ",
                               kMaxShardIntervalMs, "], got ", ms));
  }
}

// PsdConfig.shard_heartbeat_ms and shard_heartbeat_misses: defaults filled
// in, ranges checked.
void CheckShardHeartbeat(PsdConfig& c, Problems* p) {
  if (c.shard_heartbeat_ms() == 0)
    c.set_shard_heartbeat_ms(kDefaultShardHeartbeatMs);
  CheckShardInterval("shard_heartbeat_ms", c.shard_heartbeat_ms(), p);
  if (c.shard_heartbeat_misses() == 0)
    c.set_shard_heartbeat_misses(kDefaultShardHeartbeatMisses);
  if (c.shard_heartbeat_misses() > kMaxShardHeartbeatMisses) {
    p->Add("shard_heartbeat_misses",
           absl::StrCat("must be in [1, ", kMaxShardHeartbeatMisses, "], got ",
                        c.shard_heartbeat_misses()));
  }
}

// link_rate_mbit (PsdConfig, WorkerdConfig): 0 (no pacing) to 400 Gbit/s.
void CheckLinkRate(uint32_t mbit, Problems* p) {
  if (mbit > kMaxLinkRateMbit) {
    p->Add("link_rate_mbit", absl::StrCat("must be in [0, ", kMaxLinkRateMbit,
                                          "] (Mbit/s), got ", mbit));
  }
}

// A file the daemon will write: its folder must exist and it must not be a
// folder itself.
void ValidateOutputFile(const std::string& field, const std::string& path,
                        Problems* p) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    p->Add(field, absl::StrCat(path, " is a directory"));
    return;
  }
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) parent = ".";
  if (!std::filesystem::is_directory(parent, ec)) {
    p->Add(field, absl::StrCat("folder ", parent.string(), " does not exist"));
  }
}

// metrics_address (optional; port 0 allowed) and metrics_address_file
// (resolved against `path`, only with an address), for psd and workerd.
void ValidateMetricsFields(const std::string& path, std::string* address,
                           std::string* address_file, Problems* p) {
  if (!address->empty()) {
    p->Add(ValidateHostPort(*address, "metrics_address", true));
  }
  *address_file = ResolvePath(*address_file, path);
  if (address_file->empty()) return;
  if (address->empty()) {
    p->Add("metrics_address_file", "set without metrics_address");
    return;
  }
  ValidateOutputFile("metrics_address_file", *address_file, p);
}

// Reads and parses the cluster file that a daemon config names; problems
// reading it are reported against the daemon config's cluster_file field.
absl::StatusOr<LoadedCluster> LoadNamedCluster(const std::string& cluster_file,
                                               Problems* p) {
  std::string text;
  absl::Status read = ReadFile(cluster_file, &text);
  if (!read.ok()) {
    p->Add("cluster_file", std::string(read.message()));
    return p->ToStatus();
  }
  return ParseClusterConfig(text, cluster_file);
}

// Fills the default device and weights, and checks "cpu:N" / "gpu:N", no
// repeats, and one positive weight per device. (Whether this machine can
// drive a GPU is workerd's check at start.)
void ValidateDevices(WorkerdConfig* config, Problems* problems) {
  WorkerdConfig& c = *config;
  Problems& p = *problems;
  if (c.devices_size() == 0) c.add_devices(kDefaultDevice);
  for (int i = 0; i < c.devices_size(); ++i) {
    const std::string& d = c.devices(i);
    size_t colon = d.find(':');
    uint32_t index = 0;
    std::string kind = d.substr(0, colon);
    std::string number = colon == std::string::npos ? "" : d.substr(colon + 1);
    if (colon == std::string::npos || (kind != "cpu" && kind != "gpu") ||
        number.empty() ||
        number.find_first_not_of("0123456789") != std::string::npos ||
        !absl::SimpleAtoi(number, &index)) {
      p.Add(
          absl::StrCat("devices[", i, "]"),
          absl::StrCat("\"", absl::CHexEscape(d), "\" is not cpu:N or gpu:N"));
    }
    for (int j = 0; j < i; ++j) {
      if (c.devices(j) == d) {
        p.Add(absl::StrCat("devices[", i, "]"),
              absl::StrCat("\"", absl::CHexEscape(d), "\" listed twice"));
        break;
      }
    }
  }
  if (c.device_weights_size() != 0 &&
      c.device_weights_size() != c.devices_size()) {
    p.Add("device_weights",
          absl::StrCat(c.device_weights_size(), " weights for ",
                       c.devices_size(), " devices"));
  }
  for (int i = 0; i < c.device_weights_size(); ++i) {
    float w = c.device_weights(i);
    if (!(w > 0) || !std::isfinite(w)) {
      p.Add(absl::StrCat("device_weights[", i, "]"),
            "must be a positive number");
    }
  }
  if (c.device_weights_size() == 0) {
    for (int i = 0; i < c.devices_size(); ++i) {
      c.add_device_weights(kDefaultDeviceWeight);
    }
  }
}

// The scalar defaults of proto/cluster.proto's WorkerdConfig (devices and
// their weights are filled where they are validated).
void FillWorkerdDefaults(WorkerdConfig* c) {
  if (c->threads_per_device() == 0) {
    c->set_threads_per_device(kDefaultThreadsPerDevice);
  }
  if (c->loader_threads() == 0) c->set_loader_threads(kDefaultLoaderThreads);
  if (c->prefetch_batches() == 0) {
    c->set_prefetch_batches(kDefaultPrefetchBatches);
  }
  if (c->heartbeat_interval_ms() == 0) {
    c->set_heartbeat_interval_ms(kDefaultHeartbeatIntervalMs);
  }
  if (c->rpc_deadline_ms() == 0) c->set_rpc_deadline_ms(kDefaultRpcDeadlineMs);
  if (c->rpc_max_attempts() == 0) {
    c->set_rpc_max_attempts(kDefaultRpcMaxAttempts);
  }
  if (c->max_inflight_per_shard() == 0) {
    c->set_max_inflight_per_shard(kDefaultMaxInflightPerShard);
  }
  if (c->max_request_bytes() == 0) {
    c->set_max_request_bytes(kDefaultMaxRequestBytes);
  }
  if (c->max_message_bytes() == 0) {
    c->set_max_message_bytes(kDefaultMaxMessageBytes);
  }
  if (c->channels_per_shard() == 0) {
    // Paced flows: one connection per shard carries the whole share
    // (WorkerdConfig.link_rate_mbit).
    c->set_channels_per_shard(
        c->link_rate_mbit() > 0 ? 1 : kDefaultChannelsPerShard);
  }
  if (c->fusion_bytes() == 0) c->set_fusion_bytes(kDefaultFusionBytes);
  if (c->shard_locate_interval_ms() == 0) {
    c->set_shard_locate_interval_ms(kDefaultShardLocateIntervalMs);
  }
  if (c->data_dir().empty()) c->set_data_dir(kDefaultDataDir);
}

}  // namespace

absl::Status ValidateHostPort(const std::string& address,
                              const std::string& field, bool allow_port_zero) {
  const std::string shown = absl::StrCat("\"", absl::CHexEscape(address), "\"");
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", shown, " ", why));
  };
  size_t colon = address.rfind(':');
  if (address.empty() || colon == std::string::npos || colon == 0) {
    return bad("is not host:port");
  }
  const std::string host = address.substr(0, colon);
  if (host.front() == '[' || host.back() == ']') {
    if (host.size() < 2 || host.front() != '[' || host.back() != ']') {
      return bad("has an unclosed [IPv6]");
    }
    in6_addr v6;
    if (inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &v6) !=
        1) {
      return bad("has an invalid IPv6 address");
    }
  } else if (host.find(':') != std::string::npos) {
    return bad("has an IPv6 address without brackets (write [addr]:port)");
  } else if (host.find_first_not_of("0123456789.") == std::string::npos) {
    in_addr v4;
    if (inet_pton(AF_INET, host.c_str(), &v4) != 1) {
      return bad("has an invalid IPv4 address");
    }
  } else if (!ValidHostName(host)) {
    return bad("has an invalid host name (letters, digits, '-', '_' and '.')");
  }
  uint32_t port = 0;
  const std::string port_text = address.substr(colon + 1);
  if (port_text.empty() ||
      port_text.find_first_not_of("0123456789") != std::string::npos ||
      !absl::SimpleAtoi(port_text, &port) || port > 65535 ||
      (port == 0 && !allow_port_zero)) {
    return bad(absl::StrCat("has no valid port (1-65535",
                            allow_port_zero ? ", or 0 for any free port" : "",
                            ")"));
  }
  return absl::OkStatus();
}

absl::Status ValidateClusterConfig(const ClusterConfig& config,
                                   const std::string& name) {
  Problems p(name);
  if (config.shards_size() == 0) p.Add("shards", "at least one shard required");
  absl::flat_hash_map<std::string, int> seen;
  for (int i = 0; i < config.shards_size(); ++i) {
    const ShardAddress& s = config.shards(i);
    std::string field = absl::StrCat("shards[", i, "]");
    if (s.address().empty() == s.address_file().empty()) {
      p.Add(field, "set exactly one of address and address_file");
      continue;
    }
    std::string where =
        s.address().empty()
            ? absl::StrCat("file:", ResolvePath(s.address_file(), name))
            : s.address();
    if (!s.address().empty()) {
      p.Add(ValidateHostPort(s.address(), field + ".address", false));
    }
    if (auto [it, inserted] = seen.emplace(where, i); !inserted) {
      p.Add(field,
            absl::StrCat("same ",
                         s.address().empty() ? "address_file" : "address",
                         " as shards[", it->second, "]"));
    }
  }
  if (config.shards_size() > 0 &&
      config.coordinator_shard() >=
          static_cast<uint32_t>(config.shards_size())) {
    p.Add("coordinator_shard",
          absl::StrCat(config.coordinator_shard(), " is not a shard index (",
                       config.shards_size(), " shards)"));
  }
  ValidateTls(config.tls(), name, &p);
  if (!config.auth_token_file().empty()) {
    ValidateTokenFile(ResolvePath(config.auth_token_file(), name), &p);
  }
  return p.ToStatus();
}

absl::StatusOr<LoadedCluster> ParseClusterConfig(const std::string& text,
                                                 const std::string& path) {
  LoadedCluster out;
  out.path = path;
  PS_RETURN_IF_ERROR(ParseTextProto(text, path, &out.config));
  PS_RETURN_IF_ERROR(ValidateClusterConfig(out.config, path));
  ResolveTlsPaths(out.config.mutable_tls(), path);
  out.config.set_auth_token_file(
      ResolvePath(out.config.auth_token_file(), path));
  return out;
}

absl::StatusOr<LoadedCluster> LoadClusterConfig(const std::string& path) {
  std::string text;
  PS_RETURN_IF_ERROR(ReadFile(path, &text));
  return ParseClusterConfig(text, path);
}

namespace {

// PsdConfig's numeric fields: defaults filled in, ranges checked.
void FillPsdDefaults(PsdConfig& c, Problems* p) {
  if (c.max_message_bytes() == 0)
    c.set_max_message_bytes(kDefaultMaxMessageBytes);
  if (c.max_message_bytes() < kMinMaxMessageBytes ||
      c.max_message_bytes() > kMaxMaxMessageBytes) {
    p->Add("max_message_bytes",
           absl::StrCat("must be in [", kMinMaxMessageBytes, ", ",
                        kMaxMaxMessageBytes, "], got ", c.max_message_bytes()));
  }
  if (c.memory_budget_bytes() == 0)
    c.set_memory_budget_bytes(kDefaultMemoryBudgetBytes);
  if (c.worker_timeout_ms() == 0)
    c.set_worker_timeout_ms(kDefaultWorkerTimeoutMs);
  if (c.worker_timeout_ms() < kMinWorkerTimeoutMs) {
    p->Add("worker_timeout_ms",
           absl::StrCat("must be at least ", kMinWorkerTimeoutMs,
                        " (heartbeats come every 100 ms or more), got ",
                        c.worker_timeout_ms()));
  }
  if (c.shard_address_refresh_ms() == 0)
    c.set_shard_address_refresh_ms(kDefaultShardAddressRefreshMs);
  CheckShardInterval("shard_address_refresh_ms", c.shard_address_refresh_ms(),
                     p);
  CheckShardHeartbeat(c, p);
  CheckLinkRate(c.link_rate_mbit(), p);
  if (c.progress_history_rows() == 0)
    c.set_progress_history_rows(kDefaultProgressHistoryRows);
  if (!c.has_succeeded_jobs_kept()) {
    c.set_succeeded_jobs_kept(kDefaultSucceededJobsKept);
  }
  if (c.progress_history_rows() < kMinProgressHistoryRows ||
      c.progress_history_rows() > kMaxProgressHistoryRows) {
    p->Add("progress_history_rows",
           absl::StrCat("must be in [", kMinProgressHistoryRows, ", ",
                        kMaxProgressHistoryRows, "], got ",
                        c.progress_history_rows()));
  }
}

}  // namespace

absl::StatusOr<LoadedPsdConfig> ParsePsdConfig(const std::string& text,
                                               const std::string& path) {
  LoadedPsdConfig out;
  out.path = path;
  PsdConfig& c = out.psd;
  PS_RETURN_IF_ERROR(ParseTextProto(text, path, &c));
  Problems p(path);
  if (c.listen_address().empty()) c.set_listen_address(kDefaultListenAddress);
  p.Add(ValidateHostPort(c.listen_address(), "listen_address", true));
  FillPsdDefaults(c, &p);
  if (!c.status_address().empty()) {
    p.Add(ValidateHostPort(c.status_address(), "status_address", true));
  }
  if (!ValidLogLevel(c.log_level())) {
    p.Add("log_level",
          absl::StrCat("unknown level \"", absl::CHexEscape(c.log_level()),
                       "\" (trace, debug, info, warn, error, off)"));
  }
  if (c.cluster_file().empty()) {
    p.Add("cluster_file", "required");
    return p.ToStatus();
  }
  c.set_cluster_file(ResolvePath(c.cluster_file(), path));
  c.set_address_file(ResolvePath(c.address_file(), path));
  c.set_checkpoint_dir(ResolvePath(c.checkpoint_dir(), path));
  c.set_state_dir(ResolvePath(c.state_dir(), path));
  if (!c.address_file().empty())
    ValidateOutputFile("address_file", c.address_file(), &p);
  c.set_status_address_file(ResolvePath(c.status_address_file(), path));
  if (!c.status_address_file().empty())
    ValidateOutputFile("status_address_file", c.status_address_file(), &p);
  ValidateMetricsFields(path, c.mutable_metrics_address(),
                        c.mutable_metrics_address_file(), &p);
  absl::StatusOr<std::vector<int>> cores =
      ParseCpuCores("cpu_cores", c.cpu_cores(), AllowedCores());
  if (cores.ok()) out.cpu_cores = *cores;
  p.Add(cores.status());
  PS_RETURN_IF_ERROR(p.ToStatus());
  PS_ASSIGN_OR_RETURN(out.cluster, LoadNamedCluster(c.cluster_file(), &p));
  if (c.shard_id() >= static_cast<uint32_t>(out.cluster.config.shards_size())) {
    p.Add("shard_id",
          absl::StrCat(c.shard_id(), " is not in the cluster file (",
                       out.cluster.config.shards_size(), " shards)"));
  }
  PS_RETURN_IF_ERROR(p.ToStatus());
  return out;
}

absl::StatusOr<LoadedPsdConfig> LoadPsdConfig(const std::string& path) {
  std::string text;
  PS_RETURN_IF_ERROR(ReadFile(path, &text));
  return ParsePsdConfig(text, path);
}

absl::StatusOr<LoadedWorkerdConfig> ParseWorkerdConfig(
    const std::string& text, const std::string& path) {
  LoadedWorkerdConfig out;
  out.path = path;
  WorkerdConfig& c = out.workerd;
  PS_RETURN_IF_ERROR(ParseTextProto(text, path, &c));
  Problems p(path);
  if (c.cluster_file().empty()) p.Add("cluster_file", "required");
  for (size_t i = 0; i < c.name().size(); ++i) {
    const unsigned char ch = static_cast<unsigned char>(c.name()[i]);
    if (ch < 0x20 || ch == 0x7f) {
      p.Add("name", absl::StrCat("\"", absl::CHexEscape(c.name()),
                                 "\" has a control character"));
      break;
    }
  }
  ValidateDevices(&c, &p);
  FillWorkerdDefaults(&c);
  if (c.max_request_bytes() < 1024 || c.max_request_bytes() > (64u << 20)) {
    p.Add("max_request_bytes",
          absl::StrCat(c.max_request_bytes(), " is outside 1024..67108864"));
  }
  if (c.max_message_bytes() < kMinMaxMessageBytes ||
      c.max_message_bytes() > kMaxMaxMessageBytes) {
    p.Add("max_message_bytes",
          absl::StrCat(c.max_message_bytes(), " is outside ",
                       kMinMaxMessageBytes, "..", kMaxMaxMessageBytes));
  }
  CheckLinkRate(c.link_rate_mbit(), &p);
  if (c.channels_per_shard() > 16) {
    p.Add("channels_per_shard",
          absl::StrCat(c.channels_per_shard(), " is outside 1..16"));
  }
  if (c.fusion_bytes() > (64u << 20)) {
    p.Add("fusion_bytes",
          absl::StrCat(c.fusion_bytes(), " is outside 1..67108864"));
  }
  CheckShardInterval("shard_locate_interval_ms", c.shard_locate_interval_ms(),
                     &p);
  if (!ValidLogLevel(c.log_level())) {
    p.Add("log_level",
          absl::StrCat("unknown level \"", absl::CHexEscape(c.log_level()),
                       "\" (trace, debug, info, warn, error, off)"));
  }
  ValidateMetricsFields(path, c.mutable_metrics_address(),
                        c.mutable_metrics_address_file(), &p);
  absl::StatusOr<std::vector<int>> cores =
      ParseCpuCores("cpu_cores", c.cpu_cores(), AllowedCores());
  if (cores.ok()) out.cpu_cores = *cores;
  p.Add(cores.status());
  if (c.cpu_kernels().empty()) c.set_cpu_kernels(kDefaultCpuKernels);
  p.Add(ValidateCpuKernels(c.cpu_kernels()));
  if (!c.cpu_kernel_choices_file().empty() &&
      c.cpu_kernel_choices_file() != "none") {
    c.set_cpu_kernel_choices_file(
        ResolvePath(c.cpu_kernel_choices_file(), path));
    ValidateOutputFile("cpu_kernel_choices_file", c.cpu_kernel_choices_file(),
                       &p);
  }
  PS_RETURN_IF_ERROR(p.ToStatus());
  c.set_cluster_file(ResolvePath(c.cluster_file(), path));
  c.set_data_dir(ResolvePath(c.data_dir(), path));
  PS_ASSIGN_OR_RETURN(out.cluster, LoadNamedCluster(c.cluster_file(), &p));
  return out;
}

absl::StatusOr<LoadedWorkerdConfig> LoadWorkerdConfig(const std::string& path) {
  std::string text;
  PS_RETURN_IF_ERROR(ReadFile(path, &text));
  return ParseWorkerdConfig(text, path);
}

}  // namespace ps
