#include "common/logging.h"

#include "absl/strings/str_cat.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace ps {

absl::Status InitLogging(const std::string& process_name,
                         const std::string& level) {
  spdlog::level::level_enum parsed = spdlog::level::info;
  if (!level.empty()) {
    parsed = spdlog::level::from_str(level);
    // from_str maps unknown names to "off"; only "off" itself may mean off.
    if (parsed == spdlog::level::off && level != "off") {
      return absl::InvalidArgumentError(
          absl::StrCat("log_level: unknown level \"", level,
                       "\" (trace, debug, info, warn, error, off)"));
    }
  }
  spdlog::drop(process_name);  // InitLogging may run more than once (tests)
  auto logger = spdlog::stderr_logger_mt(process_name);
  logger->set_pattern(
      absl::StrCat("%Y-%m-%d %H:%M:%S.%e %^%L%$ ", process_name, "[%P] %v"));
  logger->set_level(parsed);
  spdlog::set_default_logger(logger);
  return absl::OkStatus();
}

}  // namespace ps
