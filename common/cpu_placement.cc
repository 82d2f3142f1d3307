#include "common/cpu_placement.h"

#include <dirent.h>
#include <sched.h>
#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ps {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view list,
                 absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": \"", list, "\": ", why));
}

// Every thread of this process (/proc/self/task).
std::vector<pid_t> Threads() {
  std::vector<pid_t> tids;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return tids;
  while (dirent* e = readdir(dir)) {
    int tid = 0;
    if (absl::SimpleAtoi(e->d_name, &tid)) tids.push_back(tid);
  }
  closedir(dir);
  return tids;
}

}  // namespace

std::vector<int> AllowedCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cores;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cores;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cores.push_back(c);
  }
  return cores;
}

absl::StatusOr<std::vector<int>> ParseCpuCores(
    absl::string_view field, absl::string_view list,
    const std::vector<int>& allowed) {
  std::set<int> cores;
  if (list.empty()) return std::vector<int>();
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    part = absl::StripAsciiWhitespace(part);
    std::pair<absl::string_view, absl::string_view> range =
        absl::StrSplit(part, absl::MaxSplits('-', 1));
    int lo = 0, hi = 0;
    const bool is_range = part.find('-') != absl::string_view::npos;
    if (!absl::SimpleAtoi(range.first, &lo) || lo < 0 ||
        (is_range ? !absl::SimpleAtoi(range.second, &hi) : (hi = lo, false)) ||
        hi < lo || hi >= CPU_SETSIZE) {
      return Bad(field, list,
                 absl::StrCat("\"", part,
                              "\" is not a core number or a range a-b of "
                              "them (like \"0-3,6\")"));
    }
    for (int c = lo; c <= hi; ++c) cores.insert(c);
  }
  for (int c : cores) {
    if (!std::binary_search(allowed.begin(), allowed.end(), c)) {
      return Bad(field, list,
                 absl::StrCat("core ", c,
                              " is not available to this process (it may "
                              "use ",
                              absl::StrJoin(allowed, ","), ")"));
    }
  }
  return std::vector<int>(cores.begin(), cores.end());
}

absl::Status PinProcessToCores(const std::vector<int>& cores) {
  if (cores.empty()) return absl::OkStatus();
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cores) CPU_SET(c, &set);
  // sched_setaffinity applies to one thread: set every thread running now
  // (later ones inherit their creator's set).
  for (pid_t tid : Threads()) {
    if (sched_setaffinity(tid, sizeof(set), &set) != 0 && errno != ESRCH) {
      return absl::InvalidArgumentError(
          absl::StrCat("cpu_cores: cannot pin to cores ",
                       absl::StrJoin(cores, ","), ": ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateCpuKernels(absl::string_view name) {
  if (name == "auto" || name == "onednn" || name == "openblas") {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("cpu_kernels: \"", name,
                   "\" is not \"auto\", \"onednn\" or \"openblas\""));
}

}  // namespace ps
