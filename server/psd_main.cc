// psd --config=FILE: one parameter-server shard (see server/rpc/psd_server.h).
// Exit codes: 0 clean shutdown, 1 runtime failure, 2 bad config or flags.
#include <iostream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/config.h"
#include "common/cpu_placement.h"
#include "common/logging.h"
#include "common/process_tuning.h"
#include "common/signals.h"
#include "server/rpc/psd_server.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, config, "", "psd config file (text proto PsdConfig)");
ABSL_FLAG(std::string, log_level, "", "overrides the config's log_level");
ABSL_FLAG(bool, reset_state, false,
          "coordinator: move the job store (state_dir/jobs.sqlite) aside to "
          "jobs.sqlite.bad-<UTC time> and start with no jobs");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("psd --config=FILE: a parameter-server shard");
  ps::BlockTerminationSignals();
  ps::TuneProcessForThroughput();
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_config).empty()) {
    std::cerr << "psd: --config is required\n";
    return 2;
  }
  absl::StatusOr<ps::LoadedPsdConfig> config =
      ps::LoadPsdConfig(absl::GetFlag(FLAGS_config));
  if (!config.ok()) {
    std::cerr << config.status().message() << "\n";
    return 2;
  }
  std::string level = absl::GetFlag(FLAGS_log_level).empty()
                          ? config->psd.log_level()
                          : absl::GetFlag(FLAGS_log_level);
  if (absl::Status s = ps::InitLogging("psd", level); !s.ok()) {
    std::cerr << s.message() << "\n";
    return 2;
  }
  if (absl::Status s = ps::PinProcessToCores(config->cpu_cores); !s.ok()) {
    spdlog::error("{}", s.message());
    return 2;
  }
  if (!config->cpu_cores.empty()) {
    spdlog::info("cpu_cores: running on cores {}", config->psd.cpu_cores());
  }
  ps::PsdServer server(*config);
  if (absl::GetFlag(FLAGS_reset_state)) {
    if (absl::Status s = server.ResetState(); !s.ok()) {
      spdlog::error("{}", s.message());
      return 2;
    }
  }
  if (absl::Status s = server.Start(); !s.ok()) {
    spdlog::error("{}", s.message());
    return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  int sig = ps::WaitForTerminationSignal();
  spdlog::info("signal {}: shutting down", sig);
  server.Stop();
  return 0;
}
