#include "tools/psbench/psbench_util.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ps {
namespace bench {

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  q = std::min(1.0, std::max(0.0, q));
  // Nearest rank: the smallest value with at least q of the samples <= it.
  size_t rank = static_cast<size_t>(std::ceil(q * values.size()));
  if (rank > 0) --rank;
  std::nth_element(values.begin(), values.begin() + rank, values.end());
  return values[rank];
}

std::vector<float> NormalFloats(size_t n, uint64_t seed, float stddev) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) {
    x = dist(rng);
    if (std::fabs(x) < 1e-30f) x = stddev;
  }
  return v;
}

double CpuSeconds(bool children) {
  rusage u{};
  getrusage(children ? RUSAGE_CHILDREN : RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

absl::StatusOr<double> ProcessCpuSeconds(pid_t pid) {
  std::string path = absl::StrCat("/proc/", pid, "/stat");
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  }
  // The command name (field 2) may hold spaces; fields count from after
  // its closing parenthesis: state is field 3, utime 14, stime 15.
  size_t close = line.rfind(')');
  if (close == std::string::npos) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": unexpected format"));
  }
  std::vector<absl::string_view> f = absl::StrSplit(
      absl::string_view(line).substr(close + 1), ' ', absl::SkipEmpty());
  uint64_t utime = 0, stime = 0;
  if (f.size() < 13 || !absl::SimpleAtoi(f[11], &utime) ||
      !absl::SimpleAtoi(f[12], &stime)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": unexpected format"));
  }
  return static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
}

absl::StatusOr<uint64_t> ResidentBytes(pid_t pid) {
  std::string path = absl::StrCat("/proc/", pid, "/status");
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view rest(line);
    if (!absl::ConsumePrefix(&rest, "VmRSS:")) continue;
    rest = absl::StripAsciiWhitespace(rest);
    if (!absl::ConsumeSuffix(&rest, "kB")) break;
    uint64_t kb = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &kb)) break;
    return kb * 1024;
  }
  return absl::FailedPreconditionError(absl::StrCat(path, ": no VmRSS line"));
}

namespace {

// Inode of the socket listening on `port`, from one /proc/net/tcp file.
bool ListeningInode(const std::string& table, int port, std::string* inode) {
  std::ifstream in(table);
  std::string line;
  if (!std::getline(in, line)) return false;  // header
  while (std::getline(in, line)) {
    std::vector<absl::string_view> f =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    // sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
    if (f.size() < 10 || f[3] != "0A") continue;  // 0A = LISTEN
    size_t colon = f[1].rfind(':');
    if (colon == absl::string_view::npos) continue;
    int p = 0;
    if (!absl::SimpleHexAtoi(f[1].substr(colon + 1), &p) || p != port) continue;
    *inode = std::string(f[9]);
    return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<pid_t> ListeningPid(int port) {
  std::string inode;
  if (!ListeningInode("/proc/net/tcp", port, &inode) &&
      !ListeningInode("/proc/net/tcp6", port, &inode)) {
    return absl::NotFoundError(
        absl::StrCat("no socket listens on port ", port));
  }
  const std::string target = absl::StrCat("socket:[", inode, "]");
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return absl::NotFoundError("/proc: cannot open");
  pid_t found = -1;
  while (dirent* e = readdir(proc)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    std::string fd_dir = absl::StrCat("/proc/", pid, "/fd");
    DIR* fds = opendir(fd_dir.c_str());
    if (fds == nullptr) continue;
    while (dirent* f = readdir(fds)) {
      char link[128];
      std::string path = absl::StrCat(fd_dir, "/", f->d_name);
      ssize_t n = readlink(path.c_str(), link, sizeof(link) - 1);
      if (n > 0 && absl::string_view(link, n) == target) {
        found = pid;
        break;
      }
    }
    closedir(fds);
    if (found >= 0) break;
  }
  closedir(proc);
  if (found < 0) {
    return absl::NotFoundError(absl::StrCat("port ", port,
                                            ": listening socket ", inode,
                                            " belongs to no visible process"));
  }
  return found;
}

absl::StatusOr<int> PortOf(const std::string& address) {
  size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(absl::string_view(address).substr(colon + 1), &port) ||
      port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address: \"", address, "\" is not host:port"));
  }
  return port;
}

}  // namespace bench
}  // namespace ps
