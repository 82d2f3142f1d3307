#include "common/signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

namespace ps {
namespace {

sigset_t TerminationSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR1);  // internal wake-up
  return set;
}

}  // namespace

void BlockTerminationSignals() {
  sigset_t set = TerminationSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForTerminationSignal() {
  sigset_t set = TerminationSet();
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  return sig == SIGUSR1 ? 0 : sig;
}

void ReleaseSignalWaiter(std::thread& waiter) {
  if (!waiter.joinable()) return;
  kill(getpid(), SIGUSR1);
  waiter.join();
}

}  // namespace ps
