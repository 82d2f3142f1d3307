#include "common/signals.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace ps {
namespace {

// A self-pipe: the handler writes the signal number, the waiter reads it.
// A handler (rather than sigwait with blocked signals) is needed because
// libraries such as OpenBLAS start threads before main() runs, and those
// threads would not have the signals blocked.
int g_pipe[2] = {-1, -1};

void OnSignal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  (void)!write(g_pipe[1], &b, 1);
  errno = saved;
}

}  // namespace

void BlockTerminationSignals() {
  if (g_pipe[0] >= 0) return;
  if (pipe2(g_pipe, O_CLOEXEC) != 0) return;
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

int WaitForTerminationSignal() {
  unsigned char b = 0;
  while (true) {
    ssize_t n = read(g_pipe[0], &b, 1);
    if (n == 1) return b;
    if (n < 0 && errno == EINTR) continue;
    return 0;
  }
}

void ReleaseSignalWaiter(std::thread& waiter) {
  if (!waiter.joinable()) return;
  unsigned char zero = 0;
  (void)!write(g_pipe[1], &zero, 1);
  waiter.join();
}

}  // namespace ps
