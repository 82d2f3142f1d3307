// LocalCluster: real psd and workerd processes on loopback for tests, with
// ports chosen by the kernel and read back from address files.
//
//   LocalCluster cluster(TestDir("mytest"), {.shards = 2, .workers = 2});
//   ASSERT_TRUE(cluster.Start().ok());
//   absl::StatusOr<CommandResult> r = cluster.Psctl({"list"});
//   ...  // the destructor stops every process (SIGTERM, then SIGKILL)
#ifndef TESTS_LOCAL_CLUSTER_H_
#define TESTS_LOCAL_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tests/subprocess.h"

namespace ps {

struct LocalClusterOptions {
  int shards = 2;
  int workers = 2;
  // The coordinator's worker_timeout_ms (psd config): a worker with no
  // heartbeat for this long is lost.
  int worker_timeout_ms = 3000;
  // Extra text appended to every psd / workerd config.
  std::string psd_extra;
  std::string workerd_extra;
  // WorkerdConfig.cpu_kernels of every workerd: fixed, not "auto", so that
  // runs compared bit for bit compute with the same kernels.
  std::string cpu_kernels = "onednn";
  // Extra text appended to the cluster file (tls, auth_token_file).
  std::string cluster_extra;
  // Every psd and workerd serves /metrics on a free loopback port
  // (MetricsAddress reads it back).
  bool metrics = false;
};

// Not thread-safe: one test thread drives it.
class LocalCluster {
 public:
  LocalCluster(std::string dir, LocalClusterOptions options);
  ~LocalCluster();

  // Writes the configs, starts every psd and waits for its address file,
  // then starts every workerd.
  absl::Status Start();
  // Writes the cluster file only (what Start writes first), for a test
  // that starts some processes itself with StartShard and StartWorker.
  absl::Status WriteClusterFile();
  // SIGTERM everything; the first process that does not exit 0 within 15 s
  // is an error.
  absl::Status Stop();

  // `extra` is appended to this start's psd config only (e.g. a restart on
  // the port the shard had: listen_address: "127.0.0.1:PORT").
  absl::Status StartShard(int i, const std::string& extra = "");
  absl::Status StartWorker(int i);
  Subprocess& shard(int i) { return *shards_[i]; }
  Subprocess& worker(int i) { return *workers_[i]; }

  // Runs tools/psctl/psctl --cluster=<this cluster> ARGS... with a deadline.
  absl::StatusOr<CommandResult> Psctl(
      const std::vector<std::string>& args,
      absl::Duration timeout = absl::Seconds(60)) const;

  // With options.metrics: the bound /metrics "host:port" of shard i
  // ("s", i) or worker i ("w", i), waiting up to 30 s for its file.
  absl::StatusOr<std::string> MetricsAddress(const std::string& kind,
                                             int i) const;

  const std::string& dir() const { return dir_; }
  std::string cluster_file() const { return dir_ + "/cluster.pbtxt"; }
  std::string Log(const std::string& name) const;  // contents of NAME.log

 private:
  std::string dir_;
  LocalClusterOptions options_;
  std::vector<std::unique_ptr<Subprocess>> shards_;
  std::vector<std::unique_ptr<Subprocess>> workers_;
};

// The value of `key=` in psctl's summary line ("" if absent).
std::string SummaryField(const std::string& output, const std::string& key);

}  // namespace ps

#endif  // TESTS_LOCAL_CLUSTER_H_
