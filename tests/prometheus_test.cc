// psd and workerd /metrics scraped by a real Prometheus (Debian's
// `prometheus`; skipped with a message where /usr/bin/prometheus is
// missing): a local cluster with metrics on, Prometheus scraping its four
// daemons every second, a short BSP job; then Prometheus's HTTP API must
// show that the shards' push counter grew, that the apply and request
// histograms have samples and that the workers' step-time split grew.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/text_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"
#include "tests/subprocess.h"
#include "tests/testing/cluster_fixture.h"

namespace ps {
namespace {

constexpr char kPrometheus[] = "/usr/bin/prometheus";

// Long enough (a few seconds) for several 1 s scrapes while it runs.
constexpr char kJob[] = R"pb(
  name: "metrics"
  model { mlp { input_dim: 784 hidden: 64 num_classes: 10 } }
  data {
    dataset: "synthetic"
    batch_size: 32
    epochs: 4
    synthetic_train: 8192
    synthetic_test: 512
  }
  optimizer { kind: SGD learning_rate: 0.05 momentum: 0.9 }
  consistency { mode: BSP step_deadline_ms: 30000 }
  num_workers: 2
  partition_bytes: 16384
  seed: 7
  eval_every: 200
)pb";

// A free loopback port: bound to port 0, read back, released.
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    close(fd);
    return 0;
  }
  close(fd);
  return ntohs(sa.sin_port);
}

// The body of GET `path` from 127.0.0.1:port ("" when unreachable).
std::string HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) {
    const std::string req =
        absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: localhost\r\n\r\n");
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, n);
    }
  }
  close(fd);
  const size_t body = out.find("\r\n\r\n");
  return body == std::string::npos ? "" : out.substr(body + 4);
}

// PromQL `query` URL-encoded for /api/v1/query.
std::string Encode(const std::string& query) {
  std::string out;
  for (unsigned char c : query) {
    if (isalnum(c) || c == '_' || c == '.' || c == '-') {
      out += static_cast<char>(c);
    } else {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

// The scalar value of an instant query that returns one series or a
// scalar ("value":[time,"v"]); -1 when there is none.
double QueryValue(int port, const std::string& query) {
  const std::string body =
      HttpGet(port, "/api/v1/query?query=" + Encode(query));
  const size_t at = body.find("\"value\":[");
  if (at == std::string::npos) return -1;
  const size_t open = body.find('"', body.find(',', at));
  const size_t close = body.find('"', open + 1);
  double v = -1;
  if (open == std::string::npos || close == std::string::npos ||
      !absl::SimpleAtod(body.substr(open + 1, close - open - 1), &v)) {
    return -1;
  }
  return v;
}

// Polls `query` every 200 ms until its value is at least `want` or the
// deadline passes (Prometheus scrapes on its own clock: nothing to wait on
// but its answers); returns the last value.
double WaitForValue(int port, const std::string& query, double want,
                    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  double v = QueryValue(port, query);
  while (v < want && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(200));
    v = QueryValue(port, query);
  }
  return v;
}

TEST(PrometheusTest, ScrapesShardsAndWorkersDuringAJob) {
  if (!std::filesystem::exists(kPrometheus)) {
    GTEST_SKIP() << kPrometheus
                 << " is missing: install Debian's prometheus "
                    "(tools/setup.sh --test) to run this test";
  }
  const std::string dir = TestDir("prometheus");
  LocalClusterOptions options;
  options.metrics = true;
  LocalCluster cluster(dir, options);
  ASSERT_TRUE(cluster.Start().ok());
  std::vector<std::string> shards, workers;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::string> s = cluster.MetricsAddress("s", i);
    absl::StatusOr<std::string> w = cluster.MetricsAddress("w", i);
    ASSERT_TRUE(s.ok() && w.ok()) << s.status() << w.status();
    shards.push_back(absl::StrCat("'", *s, "'"));
    workers.push_back(absl::StrCat("'", *w, "'"));
  }
  // honor_labels: the daemons' own `job` label (the training job) wins
  // over the scrape job's name.
  const std::string config = absl::StrCat(
      "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
      "scrape_configs:\n"
      "  - job_name: psd\n    honor_labels: true\n"
      "    static_configs:\n      - targets: [",
      absl::StrJoin(shards, ", "),
      "]\n"
      "  - job_name: workerd\n    honor_labels: true\n"
      "    static_configs:\n      - targets: [",
      absl::StrJoin(workers, ", "), "]\n");
  ASSERT_TRUE(WriteFileAtomically(dir + "/prometheus.yml", config).ok());
  const int port = FreePort();
  ASSERT_GT(port, 0);
  Subprocess prometheus;
  ASSERT_TRUE(
      prometheus
          .Start({kPrometheus, "--config.file=" + dir + "/prometheus.yml",
                  "--storage.tsdb.path=" + dir + "/tsdb",
                  absl::StrCat("--web.listen-address=127.0.0.1:", port),
                  "--log.level=warn"},
                 dir + "/prometheus.log")
          .ok());
  // Every target up (the workers export nothing yet, but answer).
  ASSERT_EQ(WaitForValue(port, "count(up == 1)", 4, absl::Seconds(60)), 4)
      << "Prometheus did not scrape the 4 daemons; its log:\n"
      << HttpGet(port, "/api/v1/targets");

  absl::StatusOr<CommandResult> run = RunJob(cluster, kJob, absl::Seconds(120));
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->exit_code, 0) << run->out << run->err;

  const absl::Duration kSettle = absl::Seconds(20);
  // The push counter grew on both shards while the job ran: its series
  // starts at 0 when the shard takes the job, so a sample above 0 is growth
  // (on a loaded machine the whole job may fit between two scrapes of a
  // shard, so max - min over the samples can be 0).
  EXPECT_EQ(WaitForValue(port, "count(max_over_time(ps_pushes_total[10m]) > 0)",
                         2, kSettle),
            2);
  // Histograms have samples: apply time and PushPull answer time.
  EXPECT_GT(WaitForValue(port,
                         "sum(max_over_time(ps_apply_duration_seconds_count["
                         "10m]))",
                         1, kSettle),
            0);
  EXPECT_GT(WaitForValue(port,
                         "sum(max_over_time(ps_request_duration_seconds_"
                         "bucket{method=\"PushPull\",le=\"+Inf\"}[10m]))",
                         1, kSettle),
            0);
  // Both workers' compute time grew, labelled with the job they ran.
  EXPECT_EQ(WaitForValue(port,
                         "count(max_over_time(ps_worker_step_seconds_total{"
                         "phase=\"compute\",job=~\"job-.+\"}[10m]) > 0)",
                         2, kSettle),
            2);
  EXPECT_GT(WaitForValue(
                port, "max(max_over_time(ps_worker_samples_per_second[10m]))",
                1, kSettle),
            0);
  EXPECT_EQ(prometheus.Stop(absl::Seconds(20)).value_or(-1), 0);
  EXPECT_TRUE(cluster.Stop().ok());
}

}  // namespace
}  // namespace ps
