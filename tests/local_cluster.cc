#include "tests/local_cluster.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/text_proto.h"

namespace ps {

LocalCluster::LocalCluster(std::string dir, LocalClusterOptions options)
    : dir_(std::move(dir)), options_(std::move(options)) {
  for (int i = 0; i < options_.shards; ++i)
    shards_.push_back(std::make_unique<Subprocess>());
  for (int i = 0; i < options_.workers; ++i)
    workers_.push_back(std::make_unique<Subprocess>());
}

LocalCluster::~LocalCluster() { (void)Stop(); }

namespace {

// The config lines that turn /metrics on, its address file named by `name`.
std::string MetricsLines(bool on, const std::string& name) {
  if (!on) return "";
  return absl::StrCat("metrics_address: \"127.0.0.1:0\"\n",
                      "metrics_address_file: \"", name, ".metrics.addr\"\n");
}

}  // namespace

absl::StatusOr<std::string> LocalCluster::MetricsAddress(
    const std::string& kind, int i) const {
  return WaitForFile(absl::StrCat(dir_, "/", kind, i, ".metrics.addr"),
                     absl::Seconds(30));
}

absl::Status LocalCluster::StartShard(int i, const std::string& extra) {
  std::filesystem::remove(absl::StrCat(dir_, "/s", i, ".addr"));
  std::filesystem::remove(absl::StrCat(dir_, "/s", i, ".metrics.addr"));
  std::string cfg = absl::StrCat(dir_, "/psd", i, ".pbtxt");
  absl::Status s = WriteFileAtomically(
      cfg,
      absl::StrCat("cluster_file: \"cluster.pbtxt\"\nshard_id: ", i,
                   "\naddress_file: \"s", i,
                   ".addr\"\nworker_timeout_ms: ", options_.worker_timeout_ms,
                   "\n", MetricsLines(options_.metrics, absl::StrCat("s", i)),
                   options_.psd_extra, "\n", extra, "\n"));
  if (!s.ok()) return s;
  s = shards_[i]->Start({"server/psd", "--config=" + cfg},
                        absl::StrCat(dir_, "/psd", i, ".log"));
  if (!s.ok()) return s;
  return WaitForFile(absl::StrCat(dir_, "/s", i, ".addr"), absl::Seconds(30))
      .status();
}

absl::Status LocalCluster::StartWorker(int i) {
  std::filesystem::remove(absl::StrCat(dir_, "/w", i, ".metrics.addr"));
  std::string cfg = absl::StrCat(dir_, "/worker", i, ".pbtxt");
  absl::Status s = WriteFileAtomically(
      cfg, absl::StrCat("cluster_file: \"cluster.pbtxt\"\nname: \"worker", i,
                        "\"\ndevices: \"cpu:0\"\nheartbeat_interval_ms: 200\n",
                        "cpu_kernels: \"", options_.cpu_kernels, "\"\n",
                        MetricsLines(options_.metrics, absl::StrCat("w", i)),
                        options_.workerd_extra, "\n"));
  if (!s.ok()) return s;
  return workers_[i]->Start({"worker/workerd", "--config=" + cfg},
                            absl::StrCat(dir_, "/worker", i, ".log"));
}

absl::Status LocalCluster::WriteClusterFile() {
  std::string cluster;
  for (int i = 0; i < options_.shards; ++i) {
    absl::StrAppend(&cluster, "shards { address_file: \"s", i, ".addr\" }\n");
  }
  absl::StrAppend(&cluster, "coordinator_shard: 0\n", options_.cluster_extra,
                  "\n");
  return WriteFileAtomically(cluster_file(), cluster);
}

absl::Status LocalCluster::Start() {
  absl::Status s = WriteClusterFile();
  for (int i = 0; s.ok() && i < options_.shards; ++i) s = StartShard(i);
  for (int i = 0; s.ok() && i < options_.workers; ++i) s = StartWorker(i);
  return s;
}

absl::Status LocalCluster::Stop() {
  absl::Status first;
  auto stop = [&](Subprocess& p, const std::string& name) {
    if (!p.running()) return;
    absl::StatusOr<int> code = p.Stop(absl::Seconds(15));
    if (first.ok() && (!code.ok() || *code != 0)) {
      first = absl::InternalError(
          absl::StrCat(name, " did not exit cleanly: ",
                       code.ok() ? absl::StrCat("exit ", *code)
                                 : std::string(code.status().message())));
    }
  };
  for (size_t i = 0; i < workers_.size(); ++i)
    stop(*workers_[i], absl::StrCat("worker", i));
  for (size_t i = 0; i < shards_.size(); ++i)
    stop(*shards_[i], absl::StrCat("psd", i));
  return first;
}

absl::StatusOr<CommandResult> LocalCluster::Psctl(
    const std::vector<std::string>& args, absl::Duration timeout) const {
  std::vector<std::string> argv = {"tools/psctl/psctl",
                                   "--cluster=" + cluster_file()};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, timeout);
}

std::string LocalCluster::Log(const std::string& name) const {
  std::ifstream in(absl::StrCat(dir_, "/", name, ".log"));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string SummaryField(const std::string& output, const std::string& key) {
  size_t line = output.rfind("\njob=");
  if (line == std::string::npos) return "";
  std::string summary =
      " " + output.substr(line + 1);  // every field after a space
  size_t at = summary.find(" " + key + "=");
  if (at == std::string::npos) return "";
  at += key.size() + 2;
  size_t end = summary.find_first_of(" \n", at);
  return summary.substr(
      at, end == std::string::npos ? std::string::npos : end - at);
}

}  // namespace ps
