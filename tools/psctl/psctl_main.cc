// psctl: see tools/psctl/psctl.h and `psctl --help`.
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "common/process_tuning.h"
#include "tools/psctl/psctl.h"

int main(int argc, char** argv) {
  // `psctl export` streams tables through 1 MiB messages, as the daemons
  // stream steps: the same heap and gRPC read-path settings.
  ps::TuneProcessForThroughput();
  std::vector<std::string> args(argv + 1, argv + argc);
  return ps::RunPsctl(args, std::cout, std::cerr, isatty(STDOUT_FILENO) != 0);
}
