// Clean shutdown on SIGTERM / SIGINT for the daemons.
//
//   int main() {
//     ps::BlockTerminationSignals();          // first thing in main()
//     std::thread stopper([&] {
//       if (ps::WaitForTerminationSignal() != 0) server.Stop();
//     });
//     ... serve ...
//     ps::ReleaseSignalWaiter(stopper);       // joins it
//   }
//
// A minimal handler forwards the signal through a pipe to one waiter thread,
// so shutdown code runs in a normal thread, not in the handler.
#ifndef COMMON_SIGNALS_H_
#define COMMON_SIGNALS_H_

#include <thread>

namespace ps {

// Routes SIGTERM and SIGINT to WaitForTerminationSignal. Call once.
void BlockTerminationSignals();

// Blocks until SIGTERM or SIGINT arrives (returns it), or until
// ReleaseSignalWaiter (returns 0).
int WaitForTerminationSignal();

// Wakes a thread blocked in WaitForTerminationSignal and joins it.
void ReleaseSignalWaiter(std::thread& waiter);

}  // namespace ps

#endif  // COMMON_SIGNALS_H_
