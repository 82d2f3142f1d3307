// psctl: see tools/psctl/psctl.h and `psctl --help`.
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "tools/psctl/psctl.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return ps::RunPsctl(args, std::cout, std::cerr, isatty(STDOUT_FILENO) != 0);
}
