// Bad configuration files over the real daemon binaries: `server/psd` and
// `worker/workerd` run with each file of a table and must exit with code 2,
// printing the file's path and the field (or path:line:col for syntax
// errors).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/text_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/subprocess.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

// A bad configuration: files to write (path relative to the case's folder
// -> contents; "cluster.pbtxt" defaults to a valid two-shard file), the
// binary, and what its error must say.
struct ConfigCase {
  std::string name;
  std::string binary;  // "server/psd" or "worker/workerd"
  std::map<std::string, std::string> files;
  std::vector<std::string> mentions;  // "@" = the case's folder
  std::string config = "";            // --config (default: the daemon's file)
};

constexpr char kPsd[] = "server/psd";
constexpr char kWorkerd[] = "worker/workerd";

// Not text: an ELF header, NULs, bytes that are not UTF-8.
constexpr char kGarbage[] =
    "\x7f"
    "ELF\x02\x01\x01\0\0\0\xff\xfe\x13\x10{{{\"";

TEST(BadConfigTest, BadConfigFilesStopTheDaemonsWithExitCode2) {
  const std::string root = TestDir("bad_config");
  const std::string garbage(kGarbage, sizeof(kGarbage) - 1);
  const std::string psd_ok = "cluster_file: \"cluster.pbtxt\"\nshard_id: 0\n";
  const std::string worker_ok = "cluster_file: \"cluster.pbtxt\"\n";
  auto tls_cluster = [](const std::string& tls) {
    return absl::StrCat("shards { address: \"127.0.0.1:1\" }\ntls { ", tls,
                        " }\n");
  };
  const std::string pem_cert =
      "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  const std::string pem_key =
      "-----BEGIN PRIVATE KEY-----\nMIGH\n-----END PRIVATE KEY-----\n";
  std::vector<ConfigCase> cases = {
      {"misspelled field",
       kPsd,
       {{"psd.pbtxt",
         "cluster_file: \"cluster.pbtxt\"\nlisten_adress: \"127.0.0.1:0\"\n"}},
       {"@/psd.pbtxt:2:", "listen_adress"}},
      {"wrong type",
       kPsd,
       {{"psd.pbtxt", "cluster_file: \"cluster.pbtxt\"\nshard_id: \"zero\"\n"}},
       {"@/psd.pbtxt:2:11:", "shard_id"}},
      {"value out of range for its type",
       kPsd,
       {{"psd.pbtxt",
         "shard_id: 99999999999\ncluster_file: \"cluster.pbtxt\"\n"}},
       {"@/psd.pbtxt:1:", "shard_id"}},
      {"field given twice",
       kPsd,
       {{"psd.pbtxt",
         "cluster_file: \"cluster.pbtxt\"\nshard_id: 0\nshard_id: 1\n"}},
       {"@/psd.pbtxt:3:", "shard_id"}},
      {"unbalanced braces",
       kPsd,
       {{"psd.pbtxt", psd_ok}, {"cluster.pbtxt", "shards {\n"}},
       {"@/cluster.pbtxt:2:"}},
      {"missing cluster_file",
       kPsd,
       {{"psd.pbtxt", "shard_id: 0\n"}},
       {"@/psd.pbtxt: cluster_file: required"}},
      {"cluster_file names no file",
       kPsd,
       {{"psd.pbtxt", "cluster_file: \"nowhere.pbtxt\"\n"}},
       {"@/psd.pbtxt: cluster_file:", "nowhere.pbtxt"}},
      {"cluster_file is a device",
       kPsd,
       {{"psd.pbtxt", "cluster_file: \"/dev/zero\"\n"}},
       {"@/psd.pbtxt: cluster_file:", "/dev/zero", "not a regular file"}},
      {"listen address without a port",
       kPsd,
       {{"psd.pbtxt", psd_ok + "listen_address: \"127.0.0.1\"\n"}},
       {"@/psd.pbtxt: listen_address:", "not host:port"}},
      {"listen address that is no IPv4 address",
       kPsd,
       {{"psd.pbtxt", psd_ok + "listen_address: \"300.1.2.3:0\"\n"}},
       {"@/psd.pbtxt: listen_address:", "invalid IPv4"}},
      {"listen address with a bad port",
       kPsd,
       {{"psd.pbtxt", psd_ok + "listen_address: \"localhost:99999\"\n"}},
       {"@/psd.pbtxt: listen_address:", "port"}},
      {"shard_id out of range",
       kPsd,
       {{"psd.pbtxt", "cluster_file: \"cluster.pbtxt\"\nshard_id: 5\n"}},
       {"@/psd.pbtxt: shard_id: 5 is not in the cluster file"}},
      {"config is a directory",
       kPsd,
       {{"psd.pbtxt/keep", ""}},
       {"@/psd.pbtxt", "is a directory"}},
      {"config file missing", kPsd, {}, {"@/psd.pbtxt", "No such file"}},
      {"binary garbage", kPsd, {{"psd.pbtxt", garbage}}, {"@/psd.pbtxt:1:"}},
      {"message size that would wrap to unlimited",
       kPsd,
       {{"psd.pbtxt", psd_ok + "max_message_bytes: 4294967295\n"}},
       {"@/psd.pbtxt: max_message_bytes:"}},
      {"worker timeout shorter than a heartbeat",
       kPsd,
       {{"psd.pbtxt", psd_ok + "worker_timeout_ms: 5\n"}},
       {"@/psd.pbtxt: worker_timeout_ms:"}},
      {"progress history bound out of range",
       kPsd,
       {{"psd.pbtxt", psd_ok + "progress_history_rows: 3\n"}},
       {"@/psd.pbtxt: progress_history_rows:"}},
      {"shard heartbeat out of range",
       kPsd,
       {{"psd.pbtxt", psd_ok + "shard_heartbeat_ms: 5\n"}},
       {"@/psd.pbtxt: shard_heartbeat_ms: must be in [10, 60000], got 5"}},
      {"too many shard heartbeat misses",
       kPsd,
       {{"psd.pbtxt", psd_ok + "shard_heartbeat_misses: 1000\n"}},
       {"@/psd.pbtxt: shard_heartbeat_misses: must be in [1, 100], got 1000"}},
      {"job store that is not a database",
       kPsd,
       {{"psd.pbtxt", psd_ok + "state_dir: \"state\"\n"},
        {"state/jobs.sqlite", std::string(4096, 'x')}},
       {"@/state/jobs.sqlite", "not a database", "--reset_state"}},
      {"job store that is empty (0 bytes)",  // issue 27: it started empty
       kPsd,
       {{"psd.pbtxt", psd_ok + "state_dir: \"state\"\n"},
        {"state/jobs.sqlite", ""}},
       {"@/state/jobs.sqlite", "empty (0 bytes)", "--reset_state"}},
      {"address_file in a folder that does not exist",
       kPsd,
       {{"psd.pbtxt", psd_ok + "address_file: \"run/s0.addr\"\n"}},
       {"@/psd.pbtxt: address_file:", "@/run"}},
      {"unknown log level",
       kPsd,
       {{"psd.pbtxt", psd_ok + "log_level: \"loud\"\n"}},
       {"@/psd.pbtxt: log_level:", "loud"}},
      {"coordinator_shard out of range",
       kPsd,
       {{"psd.pbtxt", psd_ok},
        {"cluster.pbtxt",
         "shards { address: \"127.0.0.1:1\" }\n"
         "coordinator_shard: 3\n"}},
       {"@/cluster.pbtxt: coordinator_shard: 3"}},
      {"the same shard twice",
       kPsd,
       {{"psd.pbtxt", psd_ok},
        {"cluster.pbtxt",
         "shards { address: \"127.0.0.1:7\" }\n"
         "shards { address: \"127.0.0.1:7\" }\n"}},
       {"@/cluster.pbtxt: shards[1]: same address as shards[0]"}},
      {"TLS files missing",
       kPsd,
       {{"psd.pbtxt", psd_ok},
        {"cluster.pbtxt", tls_cluster("cert_file: \"cert.pem\" key_file: "
                                      "\"key.pem\" ca_file: \"ca.pem\"")}},
       {"@/cluster.pbtxt: tls.cert_file:", "@/cert.pem", "tls.key_file",
        "tls.ca_file"}},
      {"TLS certificate that is not PEM",
       kPsd,
       {{"psd.pbtxt", psd_ok},
        {"cluster.pbtxt", tls_cluster("cert_file: \"cert.pem\" key_file: "
                                      "\"key.pem\" ca_file: \"ca.pem\"")},
        {"cert.pem", "hello\n"},
        {"key.pem", pem_key},
        {"ca.pem", pem_cert}},
       {"@/cluster.pbtxt: tls.cert_file:", "not a PEM file"}},
      {"TLS key file holding a certificate",
       kPsd,
       {{"psd.pbtxt", psd_ok},
        {"cluster.pbtxt", tls_cluster("cert_file: \"cert.pem\" key_file: "
                                      "\"key.pem\" ca_file: \"ca.pem\"")},
        {"cert.pem", pem_cert},
        {"key.pem", pem_cert},
        {"ca.pem", pem_cert}},
       {"@/cluster.pbtxt: tls.key_file:", "no PEM PRIVATE KEY"}},
      {"mutual TLS without a certificate",
       kPsd,
       {{"psd.pbtxt", psd_ok},
        {"cluster.pbtxt", tls_cluster("ca_file: \"ca.pem\" mutual: true")},
        {"ca.pem", pem_cert}},
       {"@/cluster.pbtxt: tls.cert_file: required for mutual TLS"}},
      {"empty token file",
       kPsd,
       {{"psd.pbtxt", psd_ok},
        {"cluster.pbtxt",
         "shards { address: \"127.0.0.1:1\" }\nauth_token_file: \"token\"\n"},
        {"token", " \n\n"}},
       {"@/cluster.pbtxt: auth_token_file:", "is empty"}},
      {"token a header cannot carry",
       kPsd,
       {{"psd.pbtxt", psd_ok},
        {"cluster.pbtxt",
         "shards { address: \"127.0.0.1:1\" }\nauth_token_file: \"token\"\n"},
        {"token", "two words\n"}},
       {"@/cluster.pbtxt: auth_token_file:", "not visible ASCII"}},
      {"duplicate devices",
       kWorkerd,
       {{"worker.pbtxt",
         worker_ok + "devices: \"cpu:0\"\ndevices: \"cpu:0\"\n"}},
       {"@/worker.pbtxt: devices[1]: \"cpu:0\" listed twice"}},
      {"unknown device kind",
       kWorkerd,
       {{"worker.pbtxt", worker_ok + "devices: \"tpu:0\"\n"}},
       {"@/worker.pbtxt: devices[0]:", "tpu:0"}},
      {"weights for the wrong number of devices",
       kWorkerd,
       {{"worker.pbtxt",
         worker_ok +
             "devices: \"cpu:0\"\ndevice_weights: 1\ndevice_weights: 2\n"}},
       {"@/worker.pbtxt: device_weights: 2 weights for 1 devices"}},
      {"workerd without cluster_file",
       kWorkerd,
       {{"worker.pbtxt", "name: \"w\"\n"}},
       {"@/worker.pbtxt: cluster_file: required"}},
      {"workerd name with a control character",
       kWorkerd,
       {{"worker.pbtxt", worker_ok + "name: \"w\\033[2J\"\n"}},
       {"@/worker.pbtxt: name:", "control character"}},
      {"workerd misspelled field",
       kWorkerd,
       {{"worker.pbtxt", worker_ok + "heartbeat_interval: 100\n"}},
       {"@/worker.pbtxt:2:", "heartbeat_interval"}},
      {"workerd binary garbage",
       kWorkerd,
       {{"worker.pbtxt", garbage}},
       {"@/worker.pbtxt:1:"}},
      {"workerd with TLS files missing",
       kWorkerd,
       {{"worker.pbtxt", worker_ok},
        {"cluster.pbtxt", tls_cluster("ca_file: \"ca.pem\"")}},
       {"@/cluster.pbtxt: tls.ca_file:", "@/ca.pem"}},
      {"psd metrics_address not host:port",
       kPsd,
       {{"psd.pbtxt", psd_ok + "metrics_address: \"9100\"\n"}},
       {"@/psd.pbtxt: metrics_address: \"9100\" is not host:port"}},
      {"psd metrics_address_file without metrics_address",
       kPsd,
       {{"psd.pbtxt", psd_ok + "metrics_address_file: \"m.addr\"\n"}},
       {"@/psd.pbtxt: metrics_address_file: set without metrics_address"}},
      {"workerd metrics_address with a bad host",
       kWorkerd,
       {{"worker.pbtxt", worker_ok + "metrics_address: \"300.1.1.1:0\"\n"}},
       {"@/worker.pbtxt: metrics_address:", "invalid IPv4"}},
      {"workerd metrics_address_file in a missing folder",
       kWorkerd,
       {{"worker.pbtxt", worker_ok +
                             "metrics_address: \"127.0.0.1:0\"\n"
                             "metrics_address_file: \"no/such/m.addr\"\n"}},
       {"@/worker.pbtxt: metrics_address_file: folder", "does not exist"}},
      {"workerd with an empty token file",
       kWorkerd,
       {{"worker.pbtxt", worker_ok},
        {"cluster.pbtxt",
         "shards { address: \"127.0.0.1:1\" }\nauth_token_file: \"token\"\n"},
        {"token", ""}},
       {"@/cluster.pbtxt: auth_token_file:", "is empty"}},
  };
  ASSERT_GE(cases.size(), 30u);
  for (size_t i = 0; i < cases.size(); ++i) {
    const ConfigCase& c = cases[i];
    const std::string dir = absl::StrCat(root, "/case", i);
    std::filesystem::create_directories(dir);
    std::map<std::string, std::string> files = c.files;
    files.emplace("cluster.pbtxt",
                  "shards { address: \"127.0.0.1:1\" }\n"
                  "shards { address: \"127.0.0.1:2\" }\n");
    for (const auto& [name, text] : files) {
      const std::string path = dir + "/" + name;
      std::filesystem::create_directories(
          std::filesystem::path(path).parent_path());
      if (name.size() < 5 || name.substr(name.size() - 5) != "/keep") {
        ASSERT_TRUE(WriteFileAtomically(path, text).ok()) << path;
      }
    }
    const std::string config =
        dir + "/" +
        (c.config.empty() ? (c.binary == kPsd ? "psd.pbtxt" : "worker.pbtxt")
                          : c.config);
    absl::StatusOr<CommandResult> r =
        RunCommand({c.binary, "--config=" + config}, absl::Seconds(20));
    ASSERT_TRUE(r.ok()) << c.name << ": " << r.status();
    EXPECT_EQ(r->exit_code, 2) << c.name << ":\n" << r->out << r->err;
    for (std::string m : c.mentions) {
      if (m[0] == '@') m = dir + m.substr(1);
      EXPECT_THAT(r->err, HasSubstr(m)) << c.name;
    }
  }
}

// A metrics port already in use stops psd and workerd with exit code 2,
// naming the address.
TEST(BadConfigTest, MetricsPortInUseExitsWithCode2) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  const std::string taken = absl::StrCat("127.0.0.1:", ntohs(sa.sin_port));
  const std::string dir = TestDir("metrics_port_in_use");
  ASSERT_TRUE(WriteFileAtomically(dir + "/cluster.pbtxt",
                                  "shards { address: \"127.0.0.1:1\" }\n")
                  .ok());
  const std::string metrics =
      absl::StrCat("metrics_address: \"", taken, "\"\n");
  ASSERT_TRUE(WriteFileAtomically(dir + "/psd.pbtxt",
                                  "cluster_file: \"cluster.pbtxt\"\n"
                                  "shard_id: 0\n" +
                                      metrics)
                  .ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/worker.pbtxt",
                                  "cluster_file: \"cluster.pbtxt\"\n" + metrics)
                  .ok());
  for (const std::string& daemon : {std::string(kPsd), std::string(kWorkerd)}) {
    const std::string config =
        dir + (daemon == kPsd ? "/psd.pbtxt" : "/worker.pbtxt");
    absl::StatusOr<CommandResult> r =
        RunCommand({daemon, "--config=" + config}, absl::Seconds(20));
    ASSERT_TRUE(r.ok()) << daemon << ": " << r.status();
    EXPECT_EQ(r->exit_code, 2) << daemon << ":\n" << r->out << r->err;
    EXPECT_THAT(r->err, HasSubstr("metrics_address: cannot listen on " + taken))
        << daemon << ":\n"
        << r->err;
  }
  close(fd);
}

}  // namespace
}  // namespace ps
