#include "worker/backend/cpu/kernel_choices.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/text_proto.h"

namespace ps {
namespace {

// The longest Record waits for another process's lock on the file.
constexpr absl::Duration kLockWait = absl::Seconds(5);

// Files past this are not ours (a few hundred shapes are a few tens of KB).
constexpr size_t kMaxFileBytes = 4u << 20;

bool ValidChoice(absl::string_view c) {
  return c == "onednn" || c == "openblas";
}

// Holds an exclusive flock on PATH.lock while alive.
class FileLock {
 public:
  static absl::StatusOr<std::unique_ptr<FileLock>> Take(
      const std::string& path) {
    const std::string lock_path = path + ".lock";
    const int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      return absl::UnavailableError(
          absl::StrCat(lock_path, ": ", std::strerror(errno)));
    }
    const absl::Time deadline = absl::Now() + kLockWait;
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK || absl::Now() > deadline) {
        const int err = errno;
        close(fd);
        return absl::UnavailableError(
            absl::StrCat(lock_path, ": ",
                         err == EWOULDBLOCK ? "held by another process for 5 s"
                                            : std::strerror(err)));
      }
      absl::SleepFor(absl::Milliseconds(10));  // another process holds it
    }
    return std::unique_ptr<FileLock>(new FileLock(fd));
  }
  ~FileLock() { close(fd_); }  // releases the flock

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  const int fd_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<KernelChoices>> KernelChoices::Open(
    const std::string& path) {
  auto choices = std::make_unique<KernelChoices>();
  choices->path_ = path;
  if (path.empty()) return choices;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return choices;
  std::string text;
  absl::Status read = ReadFile(path, &text, kMaxFileBytes);
  if (!read.ok()) return read;
  absl::MutexLock lock(&choices->mu_);
  choices->skipped_lines_ = Parse(text, &choices->choices_);
  return choices;
}

int KernelChoices::Parse(const std::string& text,
                         std::map<std::string, std::string>* into) {
  int skipped = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(line, absl::MaxSplits('\t', 1));
    if (kv.first.empty() || !ValidChoice(kv.second)) {
      ++skipped;
      continue;
    }
    into->emplace(std::string(kv.first), std::string(kv.second));
  }
  return skipped;
}

std::optional<std::string> KernelChoices::Find(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  auto it = choices_.find(key);
  if (it == choices_.end()) return std::nullopt;
  return it->second;
}

std::string KernelChoices::Record(const std::string& key,
                                  const std::string& choice,
                                  std::string* warning) {
  warning->clear();
  absl::MutexLock lock(&mu_);
  auto it = choices_.find(key);
  if (it != choices_.end()) return it->second;  // another thread was first
  std::string use = choice;
  if (!path_.empty() && key.find_first_of("\t\n") == std::string::npos) {
    absl::StatusOr<std::string> in_file = RecordInFile(key, choice);
    if (in_file.ok()) {
      use = *in_file;
    } else {
      *warning = absl::StrCat("not saved (", in_file.status().message(),
                              "): the next start times it again");
    }
  }
  choices_.emplace(key, use);
  return use;
}

absl::StatusOr<std::string> KernelChoices::RecordInFile(
    const std::string& key, const std::string& choice) {
  std::error_code ec;
  const std::filesystem::path parent =
      std::filesystem::path(path_).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  absl::StatusOr<std::unique_ptr<FileLock>> lock = FileLock::Take(path_);
  if (!lock.ok()) return lock.status();
  std::map<std::string, std::string> on_disk;
  std::string text;
  if (std::filesystem::exists(path_, ec)) {
    absl::Status read = ReadFile(path_, &text, kMaxFileBytes);
    if (!read.ok()) return read;
    Parse(text, &on_disk);
  }
  auto [it, added] = on_disk.emplace(key, choice);
  if (!added) return it->second;  // another process recorded it first
  std::string out =
      "# CPU kernels per machine and shape, chosen by timing once (workerd "
      "cpu_kernels \"auto\").\n# Delete a line to time that shape again.\n";
  for (const auto& [k, c] : on_disk) absl::StrAppend(&out, k, "\t", c, "\n");
  absl::Status write = WriteFileAtomically(path_, out);
  if (!write.ok()) return write;
  return choice;
}

std::string DefaultKernelChoicesPath() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') {
    return absl::StrCat(xdg, "/ps/cpu_kernel_choices.tsv");
  }
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] == '/') {
    return absl::StrCat(home, "/.cache/ps/cpu_kernel_choices.tsv");
  }
  return "";
}

}  // namespace ps
