// Clean shutdown on SIGTERM / SIGINT for the daemons.
//
//   int main() {
//     ps::BlockTerminationSignals();          // before any thread starts
//     std::thread stopper([&] {
//       if (ps::WaitForTerminationSignal() != 0) server.Stop();
//     });
//     ... serve ...
//     ps::ReleaseSignalWaiter(stopper);       // joins it
//   }
//
// The signals are blocked in every thread and taken synchronously by one
// waiter thread (sigwait), so shutdown code runs in a normal thread, not in
// a signal handler.
#ifndef COMMON_SIGNALS_H_
#define COMMON_SIGNALS_H_

#include <thread>

namespace ps {

// Blocks SIGTERM, SIGINT and SIGUSR1 in the calling thread and the threads
// it creates afterwards.
void BlockTerminationSignals();

// Blocks until SIGTERM or SIGINT arrives (returns it), or until
// ReleaseSignalWaiter (returns 0).
int WaitForTerminationSignal();

// Wakes a thread blocked in WaitForTerminationSignal and joins it.
void ReleaseSignalWaiter(std::thread& waiter);

}  // namespace ps

#endif  // COMMON_SIGNALS_H_
