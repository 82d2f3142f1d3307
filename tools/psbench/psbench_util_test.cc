// Tests of psbench's measurement helpers (tools/psbench/psbench_util.h,
// tools/psbench/psbench_tcp.h).
//
//   bazel test //tools/psbench:psbench_util_test
#include "tools/psbench/psbench_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tools/psbench/psbench_cluster.h"
#include "tools/psbench/psbench_tcp.h"

namespace ps {
namespace bench {
namespace {

TEST(PercentileTest, NearestRank) {
  struct Case {
    std::vector<double> values;
    double q;
    double want;
  };
  const std::vector<Case> cases = {
      {{}, 0.5, 0},
      {{7}, 0.99, 7},
      {{5, 1, 4, 2, 3}, 0.5, 3},
      {{5, 1, 4, 2, 3}, 0.0, 1},
      {{5, 1, 4, 2, 3}, 1.0, 5},
      {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.9, 9},
      {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.99, 10},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Percentile(c.values, c.q), c.want)
        << "q " << c.q << " of " << c.values.size();
  }
}

TEST(NormalFloatsTest, SeededRealisticAndNeverDenormal) {
  const std::vector<float> a = NormalFloats(100000, 3, 0.01f);
  EXPECT_EQ(a, NormalFloats(100000, 3, 0.01f));
  EXPECT_NE(a, NormalFloats(100000, 4, 0.01f));
  double sum = 0, sum2 = 0;
  for (float x : a) {
    ASSERT_TRUE(std::isnormal(x)) << x;
    sum += x;
    sum2 += static_cast<double>(x) * x;
  }
  const double mean = sum / a.size();
  EXPECT_NEAR(mean, 0.0, 3e-4);
  EXPECT_NEAR(std::sqrt(sum2 / a.size() - mean * mean), 0.01, 3e-4);
}

TEST(ProcTest, ResidentBytesAndListeningPidOfThisProcess) {
  absl::StatusOr<uint64_t> rss = ResidentBytes(getpid());
  ASSERT_TRUE(rss.ok()) << rss.status();
  EXPECT_GT(*rss, 1u << 20);

  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const int port = ntohs(a.sin_port);
  absl::StatusOr<pid_t> pid = ListeningPid(port);
  close(fd);
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_EQ(*pid, getpid());
  EXPECT_EQ(ListeningPid(port).status().code(), absl::StatusCode::kNotFound);
}

TEST(PortOfTest, Table) {
  EXPECT_EQ(*PortOf("127.0.0.1:7001"), 7001);
  EXPECT_EQ(*PortOf("[::1]:80"), 80);
  for (const char* bad :
       {"127.0.0.1", "host:", "host:0", "host:70000", "host:x"}) {
    EXPECT_EQ(PortOf(bad).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(IsLoopbackTest, Table) {
  for (const char* yes :
       {"127.0.0.1:1", "127.8.9.10:7000", "localhost:80", "[::1]:443"}) {
    EXPECT_TRUE(IsLoopback(yes)) << yes;
  }
  for (const char* no : {"10.0.0.1:80", "192.168.1.2:7000", "example.com:80",
                         "[::2]:80", "1127.0.0.1:80"}) {
    EXPECT_FALSE(IsLoopback(no)) << no;
  }
}

TEST(SocketStreamTest, MovesEveryByteOverLoopback) {
  absl::StatusOr<TcpResult> r =
      SocketStream(16 << 20, 1 << 20, absl::Seconds(20));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->method, "socket");
  EXPECT_EQ(r->bytes, 16u << 20);
  EXPECT_GT(r->seconds, 0);
  // Cycling through a tensor-sized buffer moves the same bytes.
  r = SocketStream((16 << 20) + 5, 1 << 20, absl::Seconds(20), 4 << 20);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->bytes, (16u << 20) + 5);
  EXPECT_EQ(SocketStream(1, 0, absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TcpResultTest, CpuSecondsPerGigabyte) {
  TcpResult r;
  EXPECT_EQ(r.cpu_s_per_gb(), 0);  // nothing measured
  r.bytes = 2000000000;
  EXPECT_EQ(r.cpu_s_per_gb(), 0);  // no CPU time read
  r.cpu_seconds = 3;
  EXPECT_DOUBLE_EQ(r.cpu_s_per_gb(), 1.5);
  EXPECT_DOUBLE_EQ(r.bytes_per_cpu_second(), 2e9 / 3);
}

}  // namespace
}  // namespace bench
}  // namespace ps
