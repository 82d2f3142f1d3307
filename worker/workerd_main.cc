// workerd --config=FILE: the worker daemon (see worker/workerd.h).
#include <csignal>
#include <iostream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/config.h"
#include "common/logging.h"
#include "common/process_tuning.h"
#include "common/signals.h"
#include "spdlog/spdlog.h"
#include "worker/workerd.h"

ABSL_FLAG(std::string, config, "",
          "workerd config file (text proto WorkerdConfig)");
ABSL_FLAG(std::string, log_level, "", "overrides the config's log_level");

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
  std::string level = absl::GetFlag(FLAGS_log_level).empty()
                          ? config->workerd.log_level()
                          : absl::GetFlag(FLAGS_log_level);
  if (absl::Status s = ps::InitLogging("workerd", level); !s.ok()) {
    std::cerr << s.message() << "\n";
    return 2;
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
