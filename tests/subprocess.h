// Subprocess: a child process for multi-process tests, with a deadline on
// every wait and cleanup on destruction.
//
//   Subprocess psd;
//   ASSERT_OK(psd.Start({"server/psd", "--config=" + path}, log_path));
//   ...
//   EXPECT_EQ(psd.Stop(absl::Seconds(10)), 0);  // SIGTERM, exit status
#ifndef TESTS_SUBPROCESS_H_
#define TESTS_SUBPROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ps {

// Not thread-safe; one test thread owns it.
class Subprocess {
 public:
  Subprocess() = default;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  ~Subprocess();  // SIGKILLs a child that is still running

  // Starts argv[0] (a path) with stdout and stderr appended to `log_path`.
  absl::Status Start(const std::vector<std::string>& argv,
                     const std::string& log_path);

  // Waits up to `timeout` for the child to exit; returns its exit code
  // (128 + signal if killed). DeadlineExceeded if it is still running.
  absl::StatusOr<int> Wait(absl::Duration timeout);

  // Sends `signal`; then Wait(timeout). After a timeout, SIGKILL.
  absl::StatusOr<int> Stop(absl::Duration timeout, int signal = 15);

  void Kill();  // SIGKILL, reaped
  // Started and not yet reaped (by Wait, Stop or Kill).
  bool running() const { return pid_ > 0; }
  // Polls without waiting: true while the child has not exited.
  bool Alive();
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int pidfd_ = -1;
};

// Runs a command to completion with a deadline; captures stdout and stderr.
struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout);

// Waits until `path` exists and is non-empty; returns its contents without
// trailing whitespace. Uses inotify on the folder, not sleeps.
absl::StatusOr<std::string> WaitForFile(const std::string& path,
                                        absl::Duration timeout);

// A fresh folder under $TEST_TMPDIR.
std::string TestDir(const std::string& name);

}  // namespace ps

#endif  // TESTS_SUBPROCESS_H_
