#include "common/config.h"

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/time/clock.h"
#include "common/cpu_placement.h"
#include "common/defaults.h"
#include "common/text_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = std::filesystem::path(tmp ? tmp : "/tmp") /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::create_directories(dir_);
  }
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = (dir_ / name).string();
    EXPECT_TRUE(WriteFileAtomically(path, text).ok());
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(ConfigTest, MisspelledFieldReportsPathLineColumn) {
  std::string cluster =
      Write("cluster.pbtxt", "shards { address: \"127.0.0.1:1\" }\n");
  std::string path = Write("psd.pbtxt",
                           "cluster_file: \"cluster.pbtxt\"\n"
                           "listen_adress: \"127.0.0.1:0\"\n");
  absl::StatusOr<LoadedPsdConfig> c = LoadPsdConfig(path);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()),
              AllOf(HasSubstr(path + ":2:14: "), HasSubstr("listen_adress")));
}

TEST_F(ConfigTest, WrongTypeReportsPathLineColumn) {
  std::string path = Write("psd.pbtxt",
                           "cluster_file: \"cluster.pbtxt\"\n"
                           "shard_id: \"zero\"\n");
  absl::StatusOr<LoadedPsdConfig> c = LoadPsdConfig(path);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()),
              AllOf(HasSubstr(path + ":2:11: "), HasSubstr("Expected integer"),
                    HasSubstr("(field \"shard_id\")")));
}

TEST_F(ConfigTest, SyntaxErrorReportsPathLineColumn) {
  std::string path = Write("cluster.pbtxt", "shards {\n  address: \"a:1\"\n");
  absl::StatusOr<LoadedCluster> c = LoadClusterConfig(path);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(path + ":3:1: "));
}

TEST_F(ConfigTest, MissingRequiredValueNamesField) {
  std::string path = Write("psd.pbtxt", "shard_id: 0\n");
  absl::StatusOr<LoadedPsdConfig> c = LoadPsdConfig(path);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr(path + ": cluster_file: required"));
}

TEST_F(ConfigTest, MissingFileIsNotFound) {
  absl::StatusOr<LoadedCluster> c =
      LoadClusterConfig((dir_ / "nope.pbtxt").string());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("nope.pbtxt"));
}

TEST_F(ConfigTest, ClusterProblemsAreAllListed) {
  std::string path = Write("cluster.pbtxt",
                           "shards { address: \"localhost\" }\n"
                           "shards { address: \"a:1\" address_file: \"x\" }\n"
                           "shards { address: \"b:70000\" }\n"
                           "coordinator_shard: 5\n"
                           "tls { cert_file: \"c.pem\" }\n");
  absl::StatusOr<LoadedCluster> c = LoadClusterConfig(path);
  ASSERT_FALSE(c.ok());
  std::string m(c.status().message());
  EXPECT_THAT(m,
              HasSubstr("shards[0].address: \"localhost\" is not host:port"));
  EXPECT_THAT(m, HasSubstr("shards[1]: set exactly one"));
  EXPECT_THAT(m, HasSubstr("shards[2].address: \"b:70000\" has no valid port"));
  EXPECT_THAT(m, HasSubstr("coordinator_shard: 5 is not a shard index"));
  EXPECT_THAT(m, HasSubstr("tls.ca_file: required"));
  EXPECT_THAT(m,
              HasSubstr("tls.cert_file: cert_file and key_file go together"));
}

TEST_F(ConfigTest, PsdDefaultsAndRelativePaths) {
  Write("cluster.pbtxt",
        "shards { address: \"127.0.0.1:7001\" }\n"
        "shards { address_file: \"run/shard1.addr\" }\n"
        "coordinator_shard: 0\n");
  std::string path = Write("psd.pbtxt",
                           "cluster_file: \"cluster.pbtxt\"\n"
                           "shard_id: 1\n"
                           "address_file: \"run/shard1.addr\"\n");
  std::filesystem::create_directories(dir_ / "run");
  absl::StatusOr<LoadedPsdConfig> c = LoadPsdConfig(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->psd.listen_address(), "127.0.0.1:0");
  EXPECT_EQ(c->psd.max_message_bytes(), 4u << 20);
  EXPECT_EQ(c->psd.address_file(), (dir_ / "run/shard1.addr").string());
  EXPECT_EQ(c->cluster.config.shards_size(), 2);
}

TEST_F(ConfigTest, StatusAddressIsCheckedAndItsFileResolved) {
  Write("cluster.pbtxt", "shards { address: \"127.0.0.1:7001\" }\n");
  std::string ok = Write("psd.pbtxt",
                         "cluster_file: \"cluster.pbtxt\"\n"
                         "status_address: \"127.0.0.1:0\"\n"
                         "status_address_file: \"status.addr\"\n");
  absl::StatusOr<LoadedPsdConfig> c = LoadPsdConfig(ok);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->psd.status_address_file(), (dir_ / "status.addr").string());
  std::string bad = Write("bad.pbtxt",
                          "cluster_file: \"cluster.pbtxt\"\n"
                          "status_address: \"localhost\"\n");
  c = LoadPsdConfig(bad);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("status_address"), std::string::npos)
      << c.status();
}

// An empty psd file (only the required cluster_file) gets every default of
// common/defaults.h (defaults_test checks those against the proto comments).
TEST_F(ConfigTest, EmptyPsdConfigGetsTheDefaults) {
  Write("cluster.pbtxt", "shards { address: \"127.0.0.1:7001\" }\n");
  std::string path = Write("psd.pbtxt", "cluster_file: \"cluster.pbtxt\"\n");
  absl::StatusOr<LoadedPsdConfig> c = LoadPsdConfig(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->psd.listen_address(), kDefaultListenAddress);
  EXPECT_EQ(c->psd.max_message_bytes(), kDefaultMaxMessageBytes);
  EXPECT_EQ(c->psd.memory_budget_bytes(), kDefaultMemoryBudgetBytes);
  EXPECT_EQ(c->psd.worker_timeout_ms(), kDefaultWorkerTimeoutMs);
  EXPECT_EQ(c->psd.shard_id(), 0u);
  EXPECT_EQ(c->psd.address_file(), "");
  EXPECT_EQ(c->psd.checkpoint_dir(), "");
  EXPECT_EQ(c->psd.log_level(), "");  // InitLogging reads "" as info
}

TEST_F(ConfigTest, EmptyWorkerdConfigGetsTheDefaults) {
  Write("cluster.pbtxt", "shards { address: \"127.0.0.1:7001\" }\n");
  std::string path = Write("w.pbtxt", "cluster_file: \"cluster.pbtxt\"\n");
  absl::StatusOr<LoadedWorkerdConfig> c = LoadWorkerdConfig(path);
  ASSERT_TRUE(c.ok()) << c.status();
  const WorkerdConfig& w = c->workerd;
  ASSERT_EQ(w.devices_size(), 1);
  EXPECT_EQ(w.devices(0), kDefaultDevice);
  ASSERT_EQ(w.device_weights_size(), 1);
  EXPECT_EQ(w.device_weights(0), kDefaultDeviceWeight);
  EXPECT_EQ(w.data_dir(), kDefaultDataDir);  // absolute: stays as it is
  EXPECT_EQ(w.threads_per_device(), kDefaultThreadsPerDevice);
  EXPECT_EQ(w.loader_threads(), kDefaultLoaderThreads);
  EXPECT_EQ(w.prefetch_batches(), kDefaultPrefetchBatches);
  EXPECT_EQ(w.heartbeat_interval_ms(), kDefaultHeartbeatIntervalMs);
  EXPECT_EQ(w.rpc_deadline_ms(), kDefaultRpcDeadlineMs);
  EXPECT_EQ(w.rpc_max_attempts(), kDefaultRpcMaxAttempts);
  EXPECT_EQ(w.max_inflight_per_shard(), kDefaultMaxInflightPerShard);
  EXPECT_EQ(w.max_request_bytes(), kDefaultMaxRequestBytes);
  EXPECT_EQ(w.max_message_bytes(), kDefaultMaxMessageBytes);
  EXPECT_EQ(w.channels_per_shard(), kDefaultChannelsPerShard);
  EXPECT_EQ(w.fusion_bytes(), kDefaultFusionBytes);
  EXPECT_FALSE(w.disable_overlap());
  EXPECT_EQ(w.max_jobs(), 0u);  // serve forever
  EXPECT_EQ(w.name(), "");      // workerd uses host name + pid
}

TEST_F(ConfigTest, ShardIdOutsideCluster) {
  Write("cluster.pbtxt", "shards { address: \"127.0.0.1:7001\" }\n");
  std::string path =
      Write("psd.pbtxt", "cluster_file: \"cluster.pbtxt\"\nshard_id: 3\n");
  absl::StatusOr<LoadedPsdConfig> c = LoadPsdConfig(path);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("shard_id: 3 is not in the cluster"));
}

TEST_F(ConfigTest, WorkerdValidation) {
  Write("cluster.pbtxt", "shards { address: \"127.0.0.1:7001\" }\n");
  std::string path =
      Write("w.pbtxt",
            "cluster_file: \"cluster.pbtxt\"\n"
            "devices: \"cpu:0\" devices: \"tpu:1\" devices: \"cpu:0\"\n"
            "device_weights: 1\n"
            "max_request_bytes: 512 channels_per_shard: 17\n"
            "max_message_bytes: 65535\n"
            "fusion_bytes: 67108865\n"
            "cpu_kernels: \"mkl\" cpu_cores: \"0-x\"\n"
            "cpu_kernel_choices_file: \"no/such/dir/k.tsv\"\n");
  absl::StatusOr<LoadedWorkerdConfig> c = LoadWorkerdConfig(path);
  ASSERT_FALSE(c.ok());
  std::string m(c.status().message());
  EXPECT_THAT(m, HasSubstr("devices[1]: \"tpu:1\" is not cpu:N or gpu:N"));
  EXPECT_THAT(m, HasSubstr("devices[2]: \"cpu:0\" listed twice"));
  EXPECT_THAT(m, HasSubstr("device_weights: 1 weights for 3 devices"));
  EXPECT_THAT(m, HasSubstr("max_request_bytes: 512 is outside 1024..67108864"));
  EXPECT_THAT(m, HasSubstr("channels_per_shard: 17 is outside 1..16"));
  EXPECT_THAT(
      m, HasSubstr("max_message_bytes: 65535 is outside 65536..1073741824"));
  EXPECT_THAT(m, HasSubstr("fusion_bytes: 67108865 is outside 1..67108864"));
  EXPECT_THAT(m, HasSubstr("cpu_kernels: \"mkl\" is not \"auto\""));
  EXPECT_THAT(m, HasSubstr("cpu_cores: \"0-x\": \"0-x\" is not a core"));
  EXPECT_THAT(m, HasSubstr("cpu_kernel_choices_file: folder "));
}

// Core sets: a core this process may not use is a config error naming the
// field; a valid one is parsed into the loaded config.
TEST_F(ConfigTest, CpuCores) {
  Write("cluster.pbtxt", "shards { address: \"127.0.0.1:7001\" }\n");
  const int core = AllowedCores().front();
  absl::StatusOr<LoadedWorkerdConfig> w = LoadWorkerdConfig(
      Write("w.pbtxt", absl::StrCat("cluster_file: \"cluster.pbtxt\" "
                                    "cpu_cores: \"",
                                    core, "\"\n")));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->cpu_cores, std::vector<int>{core});
  EXPECT_EQ(w->workerd.cpu_kernels(), kDefaultCpuKernels);
  EXPECT_EQ(w->workerd.cpu_kernel_choices_file(), "");
  // A relative choices file is resolved against the config's folder;
  // "none" stays "none".
  w = LoadWorkerdConfig(Write("w.pbtxt",
                              "cluster_file: \"cluster.pbtxt\" "
                              "cpu_kernel_choices_file: \"k.tsv\"\n"));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->workerd.cpu_kernel_choices_file(), (dir_ / "k.tsv").string());
  w = LoadWorkerdConfig(Write("w.pbtxt",
                              "cluster_file: \"cluster.pbtxt\" "
                              "cpu_kernel_choices_file: \"none\"\n"));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->workerd.cpu_kernel_choices_file(), "none");
  absl::StatusOr<LoadedPsdConfig> p =
      LoadPsdConfig(Write("p.pbtxt",
                          "cluster_file: \"cluster.pbtxt\" "
                          "cpu_cores: \"0-1023\"\n"));
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()),
              HasSubstr("cpu_cores: \"0-1023\": core "));
}

TEST_F(ConfigTest, LinkRatePacesOneChannelPerShard) {
  Write("cluster.pbtxt", "shards { address: \"127.0.0.1:7001\" }\n");
  // Pacing: one channel per shard unless the config names a count.
  absl::StatusOr<LoadedWorkerdConfig> w = LoadWorkerdConfig(Write(
      "w.pbtxt", "cluster_file: \"cluster.pbtxt\" link_rate_mbit: 1000\n"));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->workerd.link_rate_mbit(), 1000u);
  EXPECT_EQ(w->workerd.channels_per_shard(), 1u);
  w = LoadWorkerdConfig(Write("w.pbtxt",
                              "cluster_file: \"cluster.pbtxt\" "
                              "link_rate_mbit: 1000 channels_per_shard: 3\n"));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->workerd.channels_per_shard(), 3u);
  w = LoadWorkerdConfig(Write(
      "w.pbtxt", "cluster_file: \"cluster.pbtxt\" link_rate_mbit: 400001\n"));
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(std::string(w.status().message()),
              HasSubstr("link_rate_mbit: must be in [0, 400000]"));
  absl::StatusOr<LoadedPsdConfig> p = LoadPsdConfig(Write(
      "p.pbtxt", "cluster_file: \"cluster.pbtxt\" link_rate_mbit: 500000\n"));
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()),
              HasSubstr("link_rate_mbit: must be in [0, 400000]"));
  p = LoadPsdConfig(Write(
      "p.pbtxt", "cluster_file: \"cluster.pbtxt\" link_rate_mbit: 100\n"));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->psd.link_rate_mbit(), 100u);
}

TEST_F(ConfigTest, ResolvesAddressFilesAndTimesOut) {
  Write("cluster.pbtxt",
        "shards { address: \"127.0.0.1:7001\" }\n"
        "shards { address_file: \"s1.addr\" }\n");
  absl::StatusOr<LoadedCluster> c =
      LoadClusterConfig((dir_ / "cluster.pbtxt").string());
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<std::vector<std::string>> missing =
      ResolveShardAddresses(*c, absl::Now());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("s1.addr"));
  Write("s1.addr", "127.0.0.1:7002\n");
  absl::StatusOr<std::vector<std::string>> a =
      ResolveShardAddresses(*c, absl::Now());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, (std::vector<std::string>{"127.0.0.1:7001", "127.0.0.1:7002"}));
}

TEST(HostPortTest, Table) {
  struct Case {
    std::string address;
    bool allow_zero;
    bool ok;
  } cases[] = {
      {"127.0.0.1:80", false, true}, {"[::1]:80", false, true},
      {"host:0", true, true},        {"host:0", false, false},
      {"host", false, false},        {":80", false, false},
      {"host:-1", false, false},     {"host:65536", false, false},
      {"[::1:80", false, false},     {"", true, false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ValidateHostPort(c.address, "f", c.allow_zero).ok(), c.ok)
        << c.address;
  }
}

}  // namespace
}  // namespace ps
