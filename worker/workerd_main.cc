// workerd --config=FILE: the worker daemon (see worker/workerd.h).
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/config.h"
#include "common/cpu_placement.h"
#include "common/logging.h"
#include "common/process_tuning.h"
#include "common/signals.h"
#include "spdlog/spdlog.h"
#include "worker/backend/backend_factory.h"
#include "worker/workerd.h"

ABSL_FLAG(std::string, config, "",
          "workerd config file (text proto WorkerdConfig)");
ABSL_FLAG(std::string, log_level, "", "overrides the config's log_level");

namespace {

bool HasCpuDevice(const ps::WorkerdConfig& c) {
  for (const std::string& device : c.devices()) {
    if (device.rfind("cpu:", 0) == 0) return true;
  }
  return false;
}

// OpenBLAS picks its kernels when it loads, from OPENBLAS_CORETYPE or its
// own CPU detection, which in Debian's 0.3.21 misses recent Xeons and falls
// back to SSE3 kernels (sgemm 3-4x slower; docs/BENCHMARKS.md). When that
// happened and the variable is unset, workerd runs itself again, once, with
// the kernels that fit. Setting OPENBLAS_CORETYPE (any value) keeps
// OpenBLAS's choice. Returns only if it does not re-run.
void MaybeRerunWithFittingBlas(const ps::WorkerdConfig& c, char** argv) {
  if (!HasCpuDevice(c) || std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  const std::string want = ps::CpuBlasCoreToSet();
  if (want.empty()) return;
  std::cerr << "workerd: " << ps::CpuBlasAdvice() << "; running again with "
            << "OPENBLAS_CORETYPE=" << want << "\n";
  setenv("OPENBLAS_CORETYPE", want.c_str(), 1);
  execv("/proc/self/exe", argv);
  std::cerr << "workerd: could not run again (" << std::strerror(errno)
            << "); going on with OpenBLAS's kernels\n";
  unsetenv("OPENBLAS_CORETYPE");
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "workerd --config=FILE: trains the jobs the coordinator assigns");
  ps::BlockTerminationSignals();
  ps::TuneProcessForThroughput();
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_config).empty()) {
    std::cerr << "workerd: --config is required\n";
    return 2;
  }
  absl::StatusOr<ps::LoadedWorkerdConfig> config =
      ps::LoadWorkerdConfig(absl::GetFlag(FLAGS_config));
  if (!config.ok()) {
    std::cerr << config.status().message() << "\n";
    return 2;
  }
  // A device this build or machine cannot drive stops workerd now, not at
  // its first job.
  if (absl::Status s = ps::CheckDevices(config->workerd); !s.ok()) {
    std::cerr << "workerd: " << s.message() << "\n";
    return 2;
  }
  MaybeRerunWithFittingBlas(config->workerd, argv);
  std::string level = absl::GetFlag(FLAGS_log_level).empty()
                          ? config->workerd.log_level()
                          : absl::GetFlag(FLAGS_log_level);
  if (absl::Status s = ps::InitLogging("workerd", level); !s.ok()) {
    std::cerr << s.message() << "\n";
    return 2;
  }
  if (absl::Status s = ps::PinProcessToCores(config->cpu_cores); !s.ok()) {
    spdlog::error("{}", s.message());
    return 2;
  }
  if (!config->cpu_cores.empty()) {
    spdlog::info("cpu_cores: running on cores {}", config->workerd.cpu_cores());
  }
  // Still slow kernels: OPENBLAS_CORETYPE was set by the user, or the
  // re-run failed.
  if (HasCpuDevice(config->workerd)) {
    if (std::string advice = ps::CpuBlasAdvice(); !advice.empty()) {
      spdlog::warn("{}", advice);
    }
  }
  ps::Workerd workerd(*config);
  if (absl::Status s = workerd.StartMetrics(); !s.ok()) {
    spdlog::error("{}", s.message());
    return 2;
  }
  std::thread stopper([&] {
    int sig = ps::WaitForTerminationSignal();
    if (sig == 0) return;  // Run() ended by itself
    spdlog::info("signal {}: stopping", sig);
    workerd.Stop();
  });
  absl::Status s = workerd.Run();
  ps::ReleaseSignalWaiter(stopper);
  if (!s.ok()) {
    spdlog::error("{}", s.message());
    return 1;
  }
  return 0;
}
