#include "tests/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace ps {
namespace {

int PidfdOpen(pid_t pid) {
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
}

int MillisLeft(absl::Time deadline) {
  absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(absl::ToInt64Milliseconds(left)) + 1;
}

int DecodeStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

Subprocess::~Subprocess() { Kill(); }

absl::Status Subprocess::Start(const std::vector<std::string>& argv,
                               const std::string& log_path) {
  if (running()) return absl::FailedPreconditionError("already running");
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0)
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execv(args[0], args.data());
    _exit(127);
  }
  pid_ = pid;
  pidfd_ = PidfdOpen(pid);
  if (pidfd_ < 0)
    return absl::InternalError(
        absl::StrCat("pidfd_open: ", std::strerror(errno)));
  return absl::OkStatus();
}

bool Subprocess::Alive() {
  absl::StatusOr<int> code = Wait(absl::ZeroDuration());
  return !code.ok() && absl::IsDeadlineExceeded(code.status());
}

absl::StatusOr<int> Subprocess::Wait(absl::Duration timeout) {
  if (!running()) return absl::FailedPreconditionError("not running");
  absl::Time deadline = absl::Now() + timeout;
  while (true) {
    pollfd p{pidfd_, POLLIN, 0};
    int r = poll(&p, 1, MillisLeft(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("pid ", pid_, " still running after ",
                       absl::FormatDuration(timeout)));
    }
    int status = 0;
    if (waitpid(pid_, &status, 0) != pid_) {
      return absl::InternalError(
          absl::StrCat("waitpid: ", std::strerror(errno)));
    }
    close(pidfd_);
    pid_ = -1;
    pidfd_ = -1;
    return DecodeStatus(status);
  }
}

absl::StatusOr<int> Subprocess::Stop(absl::Duration timeout, int signal) {
  if (!running()) return absl::FailedPreconditionError("not running");
  kill(pid_, signal);
  absl::StatusOr<int> code = Wait(timeout);
  if (!code.ok()) Kill();
  return code;
}

void Subprocess::Kill() {
  if (!running()) return;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  if (pidfd_ >= 0) close(pidfd_);
  pid_ = -1;
  pidfd_ = -1;
}

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout) {
  static int counter = 0;
  std::string base = TestDir("commands") + "/cmd" + std::to_string(counter++);
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::string out_path = base + ".out", err_path = base + ".err";
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    int o = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int in = open("/dev/null", O_RDONLY);
    dup2(in, 0);
    dup2(o, 1);
    dup2(e, 2);
    execv(args[0], args.data());
    _exit(127);
  }
  int pidfd = PidfdOpen(pid);
  absl::Time deadline = absl::Now() + timeout;
  pollfd p{pidfd, POLLIN, 0};
  int r;
  do {
    r = poll(&p, 1, MillisLeft(deadline));
  } while (r < 0 && errno == EINTR);
  if (r == 0) kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  close(pidfd);
  if (r == 0) {
    return absl::DeadlineExceededError(absl::StrCat(
        argv[0], " did not finish in ", absl::FormatDuration(timeout)));
  }
  CommandResult result;
  result.exit_code = DecodeStatus(status);
  result.out = Slurp(out_path);
  result.err = Slurp(err_path);
  return result;
}

absl::StatusOr<std::string> WaitForFile(const std::string& path,
                                        absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  std::string dir = std::filesystem::path(path).parent_path().string();
  int fd = inotify_init1(IN_CLOEXEC);
  if (fd < 0) return absl::InternalError("inotify_init1 failed");
  inotify_add_watch(fd, dir.c_str(), IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE);
  while (true) {
    std::string contents = Slurp(path);
    std::string stripped(absl::StripAsciiWhitespace(contents));
    if (!stripped.empty()) {
      close(fd);
      return stripped;
    }
    pollfd p{fd, POLLIN, 0};
    int r = poll(&p, 1, MillisLeft(deadline));
    if (r == 0) {
      close(fd);
      return absl::DeadlineExceededError(absl::StrCat(
          path, " not written within ", absl::FormatDuration(timeout)));
    }
    if (r > 0) {
      char buf[4096];
      (void)!read(fd, buf, sizeof(buf));
    }
  }
}

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/", name);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace ps
